@testable import Queue
@testable import Transport

/// The input as raw RESP bytes from a Redis server, read by Herald's `RESPReader` onto a reply
/// tape (as `RedisConnection` does) in two pieces, the first byte choosing where it splits and the
/// second whether the reader runs with its real limits or with tiny ones (so the cutting of
/// outsized strings, arrays and replies is fuzzed too). Every complete reply is read the ways the
/// worker and the operator tools read replies: copied into a `RedisReply`, and walked as
/// XREAD/XREADGROUP, XAUTOCLAIM, XRANGE and XINFO replies, straight from the tape and from the copy.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard bytes.count >= 2 else { return 0 }
    let input = UnsafeRawBufferPointer(UnsafeBufferPointer(rebasing: bytes[2...]))
    let split = input.isEmpty ? 0 : Int(bytes[0]) % (input.count + 1)
    let limits = bytes[1] & 1 == 0
        ? RESPReader.Limits()
        : RESPReader.Limits(maxBulkBytes: 64, keptPrefixBytes: 16, maxReplyBytes: 1024, maxArrayElements: 8)
    let tape = RedisReplyTape()
    let reader = RESPReader(tape: tape, limits: limits)
    for piece in [input[..<split], input[split...]] where !piece.isEmpty {
        let chunk = UnsafeRawBufferPointer(rebasing: piece)
        var offset = 0
        while true {
            let complete: Bool
            do { complete = try reader.read(chunk, from: &offset) } catch { return 0 }
            guard complete else { break }
            readReply(tape, limits: limits)
            tape.reset()
        }
        guard offset == chunk.count else { fatalError("the reader stopped at \(offset) of \(chunk.count) bytes") }
    }
    return 0
}

private func readReply(_ tape: RedisReplyTape, limits: RESPReader.Limits) {
    guard !tape.nodes.isEmpty else { fatalError("a complete reply with no node") }
    guard tape.skip(0) == tape.nodes.count else { fatalError("a reply of \(tape.nodes.count) nodes skips to \(tape.skip(0))") }
    guard tape.byteCount <= limits.maxReplyBytes else { fatalError("a reply kept \(tape.byteCount) bytes, over its budget") }
    for node in tape.nodes where node.kind == .array {
        guard node.value <= Int64(limits.maxArrayElements) else { fatalError("an array kept \(node.value) elements") }
    }
    for node in tape.nodes where node.kind == .string {
        guard Int(node.length) <= limits.maxBulkBytes else { fatalError("a string kept \(node.length) bytes") }
    }
    let reply = tape.reply()
    _ = RedisReplyReader.readEntries(tape: tape)
    _ = RedisReplyReader.claimedEntries(tape: tape)
    _ = RedisReplyReader.leasedRead(tape: tape)
    _ = RedisReplyReader.readEntries(reply)
    _ = RedisReplyReader.entries(reply)
    _ = RedisReplyReader.map(reply)
    _ = try? RedisReplyReader.integer(reply, command: "XLEN")
    _ = reply.string
    _ = reply.integer
    _ = reply.isError
}
