import ArgumentParser
import Glibc
import Queue
import Transport

/// Herald's exit statuses, from sysexits(3), so a supervisor can tell a mistake that a restart
/// will not fix from an outage that a restart will outlast:
///
/// | status | meaning | restart? |
/// | --- | --- | --- |
/// | 0 | success | – |
/// | 1 | anything else (a notification rejected, a load run that lost a job, an internal error) | yes |
/// | 64 | usage: an unknown flag, a flag value out of range (EX_USAGE, ArgumentParser's own) | no |
/// | 65 | bad job data: `enqueue` or `send` was given a job Herald would refuse (EX_DATAERR) | no |
/// | 69 | Redis or APNs unavailable: refused, unreachable, timed out (EX_UNAVAILABLE) | yes |
/// | 78 | configuration: a bad config file, a missing or bad key, certificate or password file, missing credentials, a bad or out-of-range HERALD_* value or config-file setting (EX_CONFIG) | no |
/// | 130 | interrupted by Ctrl-C (the shell's convention, not sysexits) | – |
///
/// docs/operations.md lists the same table for operators; Deploy/systemd/herald@.service stops
/// restarting on 64, 65 and 78.
enum ExitStatus: Int32, CaseIterable, Sendable {
    case success = 0
    case failure = 1
    case usage = 64
    case badJobData = 65
    case unavailable = 69
    case configuration = 78
    /// Ctrl-C or SIGTERM ended a command that was waiting: the shell's 128 + SIGINT.
    case interrupted = 130
}

/// A failure with its exit status and a message that says what to do. Thrown by the commands;
/// `Herald.main()` prints `Error: <message>` (no usage text: nothing was wrong with the command
/// line) and exits with the status.
struct CommandFailure: Error, CustomStringConvertible {
    let status: ExitStatus
    let description: String

    static func badJobData(_ message: String) -> CommandFailure { CommandFailure(status: .badJobData, description: message) }
    static func unavailable(_ message: String) -> CommandFailure { CommandFailure(status: .unavailable, description: message) }
    static func configuration(_ message: String) -> CommandFailure { CommandFailure(status: .configuration, description: message) }

    /// Redis' own errors, sorted: a refused password or unusable URL is configuration, a refused
    /// or dropped connection is an outage, an error reply is neither.
    static func redis(_ error: RedisError) -> CommandFailure {
        switch error {
        case .authenticationFailed, .invalidURL:
            return .configuration(error.description + ". " + redisHint)
        case .connectFailed, .connectionLost, .protocolError:
            return .unavailable(error.description + ". " + redisHint)
        case .server:
            return CommandFailure(status: .failure, description: error.description)
        }
    }

    /// The queue tools' errors (`stats`, `dead-letters`, `feedback`), sorted the same way.
    static func queueTool(_ error: QueueToolError) -> CommandFailure {
        switch error {
        case .unreachable, .connectionLost, .timedOut, .masterNotFound:
            return .unavailable(error.description)
        case .authenticationFailed:
            return .configuration(error.description)
        case .server(_, let message) where message.hasPrefix("NOAUTH") || message.hasPrefix("WRONGPASS"):
            return .configuration(error.description)
        case .invalidArgument:
            return CommandFailure(status: .usage, description: error.description)
        case .interrupted:
            return CommandFailure(status: .interrupted, description: error.description)
        case .server, .unexpectedReply:
            return CommandFailure(status: .failure, description: error.description)
        }
    }

    static let redisHint = "Point Herald at your Redis with --redis redis://[user@]host[:port][/db] or HERALD_REDIS, "
        + "and give its password with --redis-password-file or HERALD_REDIS_PASSWORD"

    /// Runs `body`, turning any error it throws into a configuration failure (a usage error stays
    /// one): for steps that only read settings and the files they name.
    static func configuring<T>(_ body: () throws -> T) throws -> T {
        do {
            return try body()
        } catch let failure as CommandFailure {
            throw failure
        } catch let error as ValidationError {
            throw CommandFailure.configuration(error.message)
        } catch {
            throw CommandFailure.configuration("\(error)")
        }
    }
}

extension Herald {
    /// ArgumentParser's `main()`, with Herald's failures mapped to their exit statuses:
    /// `CommandFailure` (and the queue tools' `QueueToolError`) print one `Error:` line and exit
    /// with their status; everything else (usage errors 64, `ExitCode`, help, --version) is
    /// ArgumentParser's.
    static func main() {
        let failure: CommandFailure
        do {
            var command = try parseAsRoot()
            try command.run()
            return
        } catch let error as CommandFailure {
            failure = error
        } catch let error as QueueToolError {
            failure = CommandFailure.queueTool(error)
        } catch {
            exit(withError: error)
        }
        let bytes = Array("Error: \(failure.description)\n".utf8)
        _ = bytes.withUnsafeBytes { write(2, $0.baseAddress, $0.count) }
        Glibc.exit(failure.status.rawValue)
    }
}
