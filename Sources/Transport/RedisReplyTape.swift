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
    private var bytes: [UInt8] = []
    public private(set) var truncations: [Truncation] = []
    /// Capacities kept between replies; an outsized reply's buffers are given back after it.
    static let keptByteCapacity = 1 << 20
    static let keptNodeCapacity = 1 << 15

    public init() {
        nodes.reserveCapacity(1024)
        bytes.reserveCapacity(64 * 1024)
    }

    public func reset() {
        if bytes.capacity > RedisReplyTape.keptByteCapacity {
            bytes = []
            bytes.reserveCapacity(64 * 1024)
        } else {
            bytes.removeAll(keepingCapacity: true)
        }
        if nodes.capacity > RedisReplyTape.keptNodeCapacity {
            nodes = []
            nodes.reserveCapacity(1024)
        } else {
            nodes.removeAll(keepingCapacity: true)
        }
        if !truncations.isEmpty { truncations.removeAll() }
    }

    /// Bytes of strings on the tape.
    public var byteCount: Int { bytes.count }
    /// Bytes the tape holds on to (for tests of its memory).
    public var byteCapacity: Int { bytes.capacity }

    // Building, for `RESPReader`.

    func beginString(_ kind: Node.Kind) -> Int {
        nodes.append(Node(kind: kind, value: 0, start: Int32(truncatingIfNeeded: bytes.count), length: 0))
        return nodes.count - 1
    }

    /// A whole string node at once: its bytes and its final length.
    @inline(__always)
    func appendString(_ kind: Node.Kind, _ chunk: UnsafeRawBufferPointer) {
        nodes.append(Node(kind: kind, value: 0, start: Int32(truncatingIfNeeded: bytes.count), length: Int32(truncatingIfNeeded: chunk.count)))
        if !chunk.isEmpty { bytes.append(contentsOf: chunk) }
    }

    func appendBytes(_ chunk: UnsafeRawBufferPointer) {
        if !chunk.isEmpty { bytes.append(contentsOf: chunk) }
    }

    func endString(_ index: Int) {
        let node = nodes[index]
        nodes[index] = Node(kind: node.kind, value: 0, start: node.start, length: Int32(truncatingIfNeeded: bytes.count - Int(node.start)))
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
        return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[Int(node.start)..<Int(node.start + node.length)])) }
    }

    /// Every string byte of the tape, valid during `body`: string node `i` is at
    /// `nodes[i].start ..< nodes[i].start + nodes[i].length`, and strings lie in node order, back
    /// to back.
    public func withAllBytes<R>(_ body: (UnsafeRawBufferPointer) -> R) -> R {
        bytes.withUnsafeBytes(body)
    }

    /// A copy of the bytes of string node `index`.
    public func byteArray(of index: Int) -> [UInt8] {
        let node = nodes[index]
        return Array(bytes[Int(node.start)..<Int(node.start + node.length)])
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
