import Transport

/// What went wrong in an operator tool (`herald stats`, `dead-letters`, `feedback`), worded for
/// the operator: where Redis was looked for and how to point Herald elsewhere.
public enum QueueToolError: Error, CustomStringConvertible, Sendable, Equatable {
    /// Redis could not be reached at all (refused, unresolvable, timed out, bad password).
    case unreachable(endpoint: String, cause: String)
    /// Redis refused the password, or wants one (WRONGPASS, NOAUTH).
    case authenticationFailed(endpoint: String, message: String)
    /// The connection dropped in the middle of the work.
    case connectionLost(endpoint: String, cause: String)
    /// Redis did not answer within the time allowed.
    case timedOut(endpoint: String, command: String, seconds: Int)
    /// Redis answered with an error reply.
    case server(command: String, message: String)
    /// Redis answered with something the tool does not understand.
    case unexpectedReply(command: String, reply: String)
    /// SIGINT or SIGTERM arrived while waiting.
    case interrupted
    /// An argument the tool cannot use.
    case invalidArgument(String)
    /// The sentinels named no master that could be reached and says it is one.
    case masterNotFound(sentinel: String, cause: String)

    public var description: String {
        switch self {
        case .unreachable(let endpoint, let cause):
            return "cannot reach Redis at \(endpoint) (\(cause)). Point Herald at your Redis with "
                + "--redis redis://[user[:password]@]host[:port][/db] or the HERALD_REDIS environment variable."
        case .authenticationFailed(let endpoint, let message):
            return "Redis at \(endpoint) refused to authenticate Herald: \(message) Give the password with "
                + "--redis-password-file FILE or the HERALD_REDIS_PASSWORD environment variable."
        case .connectionLost(let endpoint, let cause):
            return "lost the connection to Redis at \(endpoint) (\(cause)). Every step is atomic and safe to repeat: run the command again to finish."
        case .timedOut(let endpoint, let command, let seconds):
            return "Redis at \(endpoint) did not answer \(command) within \(seconds) s."
        case .server(let command, let message):
            if message.hasPrefix("NOAUTH") || message.hasPrefix("WRONGPASS") {
                return "Redis refused \(command): \(message) Give the password with "
                    + "--redis-password-file FILE or the HERALD_REDIS_PASSWORD environment variable."
            }
            return "Redis refused \(command): \(message)"
        case .unexpectedReply(let command, let reply):
            return "unexpected reply to \(command) from Redis: \(reply)"
        case .interrupted:
            return "interrupted"
        case .invalidArgument(let message):
            return message
        case .masterNotFound(let sentinel, let cause):
            return "cannot find the Redis master \(sentinel) (\(cause)). Check --sentinel (host:port of each sentinel, "
                + "HERALD_SENTINEL) and --sentinel-master (the name in the sentinels' `sentinel monitor` line, HERALD_SENTINEL_MASTER)."
        }
    }
}

extension QueueToolError {
    /// The sentinels' failure worded for the operator: which master, via which sentinels, and
    /// what each sentinel answered.
    public static func masterNotFound(_ sentinel: SentinelConfiguration, _ error: RedisError) -> QueueToolError {
        if case .authenticationFailed(let message) = error {
            return .authenticationFailed(endpoint: "the master named by Sentinel", message: message)
        }
        return .masterNotFound(sentinel: sentinel.summary, cause: SentinelToolText.cause(error))
    }
}
