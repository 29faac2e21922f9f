import APNs

/// A set of device tokens that holds at most `capacity`: inserting one more forgets the oldest
/// (insertion order). Keyed by the token as the worker keeps it (`DeviceToken`): the per-send
/// lookup builds no string for a packed token. Loop-confined.
public struct BoundedTokenSet {
    public let capacity: Int
    private var members: [DeviceToken: UInt64] = [:]
    /// Tokens in insertion order with the sequence they were inserted with, from `head` on; an
    /// entry whose sequence is no longer its token's is stale (removed or inserted again).
    private var order: [(token: DeviceToken, sequence: UInt64)] = []
    private var head = 0
    private var nextSequence: UInt64 = 0

    /// `capacity` 0: nothing is ever held.
    public init(capacity: Int) {
        self.capacity = max(0, capacity)
    }

    public var isEmpty: Bool { members.isEmpty }
    public var count: Int { members.count }

    public func contains(_ token: DeviceToken) -> Bool { members[token] != nil }

    public func contains(_ token: String) -> Bool { contains(DeviceToken(token)) }

    public mutating func insert(_ token: String) { insert(DeviceToken(token)) }

    public mutating func remove(_ token: String) { remove(DeviceToken(token)) }

    public mutating func insert(_ token: DeviceToken) {
        guard capacity > 0, members[token] == nil else { return }
        if members.count >= capacity {
            while head < order.count {
                let oldest = order[head]
                head += 1
                if members[oldest.token] == oldest.sequence {
                    members[oldest.token] = nil
                    break
                }
            }
        }
        nextSequence += 1
        members[token] = nextSequence
        order.append((token, nextSequence))
        if head > 4_096 && head * 2 > order.count || order.count - head > 2 * capacity + 64 {
            order = order[head...].filter { members[$0.token] == $0.sequence }
            head = 0
        }
    }

    public mutating func remove(_ token: DeviceToken) {
        members[token] = nil
    }
}
