import CHiredis

/// A Redis reply laid out flat: its nodes in pre-order (an array before its elements) and every
/// string's bytes in one buffer. hiredis' reader fills it through reply-object callbacks, so a
/// reply of a thousand stream entries costs two growing buffers instead of a malloc per element.
///
/// Owned by one `RedisConnection` and reused reply after reply. A `RedisReplyTape` handed to a
/// raw completion is valid only during that call; `reply()` copies it into a `RedisReply`.
public final class RedisReplyTape {
    public struct Node {
        public enum Kind: UInt8 { case string, status, error, integer, null, array }
        public let kind: Kind
        /// Elements of an array, or the value of an integer.
        public let value: Int64
        let start: Int32
        let length: Int32
    }

    public private(set) var nodes: [Node] = []
    private var bytes: [UInt8] = []

    init() {
        nodes.reserveCapacity(1024)
        bytes.reserveCapacity(64 * 1024)
    }

    func reset() {
        nodes.removeAll(keepingCapacity: true)
        bytes.removeAll(keepingCapacity: true)
    }

    fileprivate func appendString(type: Int32, _ pointer: UnsafePointer<CChar>?, _ length: Int) {
        let start = Int32(bytes.count)
        if let pointer, length > 0 {
            bytes.append(contentsOf: UnsafeRawBufferPointer(start: pointer, count: length))
        }
        let kind: Node.Kind = type == REDIS_REPLY_STATUS ? .status : type == REDIS_REPLY_ERROR ? .error : .string
        nodes.append(Node(kind: kind, value: 0, start: start, length: Int32(length)))
    }

    fileprivate func append(_ kind: Node.Kind, value: Int64) {
        nodes.append(Node(kind: kind, value: value, start: 0, length: 0))
    }

    /// The bytes of string node `index`, valid while the tape is not reset.
    public func withBytes<R>(of index: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        let node = nodes[index]
        return bytes.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[Int(node.start)..<Int(node.start + node.length)])) }
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

    /// hiredis' reader, building replies into `tape`.
    static func makeReader(for tape: RedisReplyTape) -> UnsafeMutablePointer<redisReader>? {
        guard let reader = redisReaderCreateWithFunctions(tapeFunctions) else { return nil }
        reader.pointee.privdata = Unmanaged.passUnretained(tape).toOpaque()
        return reader
    }
}

/// Any non-null pointer: hiredis only needs to know that an object was made.
nonisolated(unsafe) private let madeObject = UnsafeMutableRawPointer(bitPattern: 0x1)

@inline(__always)
private func withTape(_ task: UnsafePointer<redisReadTask>?, _ body: (RedisReplyTape) -> Void) {
    withUnretained(task!.pointee.privdata, body)
}

nonisolated(unsafe) private let tapeFunctions: UnsafeMutablePointer<redisReplyObjectFunctions> = {
    let functions = UnsafeMutablePointer<redisReplyObjectFunctions>.allocate(capacity: 1)
    functions.initialize(to: redisReplyObjectFunctions(
        createString: { task, pointer, length in
            withTape(task) { $0.appendString(type: task!.pointee.type, pointer, length) }
            return madeObject
        },
        createArray: { task, elements in
            withTape(task) { $0.append(.array, value: Int64(max(0, elements))) }
            return madeObject
        },
        createInteger: { task, value in
            withTape(task) { $0.append(.integer, value: Int64(value)) }
            return madeObject
        },
        createNil: { task in
            withTape(task) { $0.append(.null, value: 0) }
            return madeObject
        },
        freeObject: { _ in }))
    return functions
}()
