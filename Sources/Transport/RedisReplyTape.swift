/// A Redis reply laid out flat: its nodes in pre-order (an array before its elements) and every
/// string's bytes in one buffer. `RESPReader` fills it as the bytes arrive, so a reply of a
/// thousand stream entries costs two growing buffers instead of a malloc per element, and an
/// outsized string costs a bounded prefix (see `truncations`).
///
/// Owned by one `RedisConnection` and reused reply after reply. A `RedisReplyTape` handed to a
/// raw completion is valid only during that call; `reply()` copies it into a `RedisReply`.
public final class RedisReplyTape {
    public struct Node {
        public enum Kind: UInt8 { case string, status, error, integer, null, array }
        public let kind: Kind
        /// Elements of an array (those kept), or the value of an integer.
        public let value: Int64
        /// Where a string's bytes start among the tape's bytes (see `withAllBytes`).
        public let start: Int32
        /// Bytes kept of a string.
        public let length: Int32
    }

    /// A string (or array) node the reader cut: its full length (elements, for an array) and, for
    /// a string, the SHA-256 of all its bytes. Empty unless a reply was outsized.
    public struct Truncation: Sendable {
        public let node: Int
        public let fullLength: Int
        public let sha256: [UInt8]
        /// Cut because the reply had used its byte budget, not for its own size.
        public let byBudget: Bool
    }

    public private(set) var nodes: [Node] = []
    /// The strings' bytes: a buffer of its own rather than a `[UInt8]`, whose generic
    /// `append(contentsOf:)` cost ~120 instructions a string (8 or more strings per entry).
    private var bytes: UnsafeMutableRawPointer
    private var used = 0
    private var capacity: Int
    static let initialByteCapacity = 64 * 1024
    public private(set) var truncations: [Truncation] = []
    /// Capacities kept between replies; an outsized reply's buffers are given back after it.
    static let keptByteCapacity = 1 << 20
    static let keptNodeCapacity = 1 << 15

    public init() {
        nodes.reserveCapacity(1024)
        capacity = RedisReplyTape.initialByteCapacity
        bytes = .allocate(byteCount: capacity, alignment: 16)
    }

    deinit { bytes.deallocate() }

    public func reset() {
        if capacity > RedisReplyTape.keptByteCapacity {
            bytes.deallocate()
            capacity = RedisReplyTape.initialByteCapacity
            bytes = .allocate(byteCount: capacity, alignment: 16)
        }
        used = 0
        if nodes.capacity > RedisReplyTape.keptNodeCapacity {
            nodes = []
            nodes.reserveCapacity(1024)
        } else {
            nodes.removeAll(keepingCapacity: true)
        }
        if !truncations.isEmpty { truncations.removeAll() }
    }

    /// Bytes of strings on the tape.
    public var byteCount: Int { used }
    /// Bytes the tape holds on to (for tests of its memory).
    public var byteCapacity: Int { capacity }

    // Building, for `RESPReader`.

    func beginString(_ kind: Node.Kind) -> Int {
        nodes.append(Node(kind: kind, value: 0, start: Int32(truncatingIfNeeded: used), length: 0))
        return nodes.count - 1
    }

    /// A whole string node at once: its bytes and its final length.
    @inline(__always)
    func appendString(_ kind: Node.Kind, _ chunk: UnsafeRawBufferPointer) {
        nodes.append(Node(kind: kind, value: 0, start: Int32(truncatingIfNeeded: used), length: Int32(truncatingIfNeeded: chunk.count)))
        appendBytes(chunk)
    }

    @inline(__always)
    func appendBytes(_ chunk: UnsafeRawBufferPointer) {
        guard let source = chunk.baseAddress, !chunk.isEmpty else { return }
        if chunk.count > capacity - used { grow(toHold: used + chunk.count) }
        (bytes + used).copyMemory(from: source, byteCount: chunk.count)
        used += chunk.count
    }

    /// At least doubles the byte buffer (geometric growth, as an array's), keeping what it holds.
    private func grow(toHold needed: Int) {
        let larger = max(needed, 2 * capacity)
        let moved = UnsafeMutableRawPointer.allocate(byteCount: larger, alignment: 16)
        moved.copyMemory(from: bytes, byteCount: used)
        bytes.deallocate()
        bytes = moved
        capacity = larger
    }

    func endString(_ index: Int) {
        let node = nodes[index]
        nodes[index] = Node(kind: node.kind, value: 0, start: node.start, length: Int32(truncatingIfNeeded: used - Int(node.start)))
    }

    @discardableResult
    func appendNode(_ kind: Node.Kind, value: Int64) -> Int {
        nodes.append(Node(kind: kind, value: value, start: 0, length: 0))
        return nodes.count - 1
    }

    func markTruncated(_ index: Int, fullLength: Int, sha256: [UInt8], byBudget: Bool = false) {
        truncations.append(Truncation(node: index, fullLength: fullLength, sha256: sha256, byBudget: byBudget))
    }

    /// The bytes of string node `index`, valid while the tape is not reset.
    public func withBytes<R>(of index: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let node = nodes[index]
        return body(UnsafeRawBufferPointer(start: bytes + Int(node.start), count: Int(node.length)))
    }

    /// Every string byte of the tape, valid during `body`: string node `i` is at
    /// `nodes[i].start ..< nodes[i].start + nodes[i].length`, and strings lie in node order, back
    /// to back.
    public func withAllBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        body(UnsafeRawBufferPointer(start: bytes, count: used))
    }

    /// A copy of the bytes of string node `index`.
    public func byteArray(of index: Int) -> [UInt8] {
        let node = nodes[index]
        return Array(UnsafeRawBufferPointer(start: bytes + Int(node.start), count: Int(node.length)))
    }

    /// The index just past node `index` and everything below it.
    public func skip(_ index: Int) -> Int {
        var next = index + 1
        if nodes[index].kind == .array {
            for _ in 0..<nodes[index].value { next = skip(next) }
        }
        return next
    }

    /// The reply as a `RedisReply` value (a copy that outlives the tape).
    public func reply() -> RedisReply {
        var index = 0
        return reply(at: &index)
    }

    private func reply(at index: inout Int) -> RedisReply {
        let node = nodes[index]
        let position = index
        index += 1
        switch node.kind {
        case .string: return .bulk(byteArray(of: position))
        case .status: return .status(withBytes(of: position) { String(decoding: $0, as: UTF8.self) })
        case .error: return .error(withBytes(of: position) { String(decoding: $0, as: UTF8.self) })
        case .integer: return .integer(node.value)
        case .null: return .null
        case .array:
            var elements: [RedisReply] = []
            elements.reserveCapacity(Int(node.value))
            for _ in 0..<node.value { elements.append(reply(at: &index)) }
            return .array(elements)
        }
    }
}
