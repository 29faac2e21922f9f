import Transport

/// Something that runs Redis commands and hands back their replies in order: what the operator
/// tools (`QueueInspector`, `DeadLetterTools`, `FeedbackReader`) are written against, so their
/// request and reply shaping does not care how the bytes travel. `BlockingRedisClient` is the one
/// the command line uses.
public protocol RedisCommandExecutor: AnyObject {
    /// Sends `commands` pipelined and returns one reply per command, in order. Error replies come
    /// back as `.error`; only transport failures throw (a `QueueToolError`).
    func pipeline(_ commands: [[RedisArgument]], timeoutMilliseconds: Int64) throws -> [RedisReply]
}

extension RedisCommandExecutor {
    /// The default time a tool waits for Redis.
    public static var defaultTimeoutMilliseconds: Int64 { 15_000 }

    public func pipeline(_ commands: [[RedisArgument]]) throws -> [RedisReply] {
        try pipeline(commands, timeoutMilliseconds: Self.defaultTimeoutMilliseconds)
    }

    /// Runs one command; an error reply throws `QueueToolError.server`.
    @discardableResult
    public func run(_ command: [RedisArgument], timeoutMilliseconds: Int64 = Self.defaultTimeoutMilliseconds) throws -> RedisReply {
        let reply = try pipeline([command], timeoutMilliseconds: timeoutMilliseconds)[0]
        if case .error(let message) = reply { throw QueueToolError.server(command: RedisCommandText.name(command), message: message) }
        return reply
    }
}

/// How a command is named in messages: its verb and first key, never its values.
public enum RedisCommandText {
    public static func name(_ command: [RedisArgument]) -> String {
        command.prefix(2).map { argument -> String in
            switch argument {
            case .text(let text): return text
            case .bytes(let bytes): return String(decoding: bytes.prefix(64), as: UTF8.self)
            case .integer(let value): return String(value)
            }
        }.joined(separator: " ")
    }
}
