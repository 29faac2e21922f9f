import CHiredis
@testable import Queue
@testable import Transport

/// The input as raw RESP bytes from a Redis server, fed to hiredis' reader with Herald's reply
/// tape (as `RedisConnection` does) in two pieces, the first byte choosing where it splits. Every
/// complete reply is read the ways the worker and the operator tools read replies: copied into a
/// `RedisReply`, and walked as XREAD/XREADGROUP, XRANGE and XINFO replies, straight from the tape
/// and from the copy.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let bytes = UnsafeBufferPointer(start: data, count: size)
    guard let first = bytes.first else { return 0 }
    let input = UnsafeBufferPointer(rebasing: bytes[1...])
    let split = input.isEmpty ? 0 : Int(first) % (input.count + 1)
    let tape = RedisReplyTape()
    guard let reader = RedisReplyTape.makeReader(for: tape) else { return 0 }
    defer { redisReaderFree(reader) }
    for piece in [input[..<split], input[split...]] where !piece.isEmpty {
        let fed = UnsafeBufferPointer(rebasing: piece).withMemoryRebound(to: CChar.self) {
            redisReaderFeed(reader, $0.baseAddress, $0.count)
        }
        guard fed == REDIS_OK else { return 0 }
        while true {
            var reply: UnsafeMutableRawPointer? = nil
            guard redisReaderGetReply(reader, &reply) == REDIS_OK else { return 0 }
            guard reply != nil else { break }
            readReply(tape)
            tape.reset()
        }
    }
    return 0
}

private func readReply(_ tape: RedisReplyTape) {
    guard !tape.nodes.isEmpty else { fatalError("hiredis made a reply the tape did not record") }
    guard tape.skip(0) == tape.nodes.count else { fatalError("a reply of \(tape.nodes.count) nodes skips to \(tape.skip(0))") }
    let reply = tape.reply()
    _ = RedisReplyReader.readEntries(tape: tape)
    _ = RedisReplyReader.readEntries(reply)
    _ = RedisReplyReader.entries(reply)
    _ = RedisReplyReader.map(reply)
    _ = try? RedisReplyReader.integer(reply, command: "XLEN")
    _ = reply.string
    _ = reply.integer
    _ = reply.isError
}
