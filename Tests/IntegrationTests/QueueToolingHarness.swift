import Foundation
import HeraldTestSupport
import Queue
import Testing
import Transport

/// A private redis-server (the shared `RedisServer` fixture), a blocking client to shape data
/// the way the worker writes it, and a runner for the real `herald` binary pointed at that server.
final class QueueToolingHarness {
    let server: RedisServer
    let redis: BlockingRedisClient
    let keys: QueueKeys
    let directory: TemporaryDirectory
    private var runs = 0

    init(queue: String = "tooling", tls: RedisServer.TLS? = nil) throws {
        server = try RedisServer(tls: tls)
        redis = try BlockingRedisClient(endpoint: server.endpoint)
        keys = QueueKeys(queue: queue)
        directory = try TemporaryDirectory(prefix: "herald-qt")
    }

    deinit { server.stop() }

    // MARK: Redis

    /// Runs one command; an error reply fails the test.
    @discardableResult
    func command(_ arguments: String...) throws -> RedisReply {
        try command(arguments)
    }

    @discardableResult
    func command(_ arguments: [String]) throws -> RedisReply {
        try redis.run(arguments.map { .text($0) })
    }

    func length(_ key: String) throws -> Int {
        Int(try command("XLEN", key).integer ?? -1)
    }

    func entries(_ key: String) throws -> [StreamRecord] {
        RedisReplyReader.entries(try command("XRANGE", key, "-", "+"))
    }

    /// Adds a dead letter exactly as `DeadLetter.Draft.command` writes one: the job's fields
    /// (without token/tokens when `tokens` narrows them), the failed tokens, then reason, message,
    /// status, attempts and failed_at. Returns the entry id.
    @discardableResult
    func addDeadLetter(id: String = "*", job: [(String, String)], tokens: [String]? = nil, reason: String, message: String,
                       status: Int = 0, attempts: Int = 0, failedAt: Int64? = nil) throws -> String {
        var arguments = ["XADD", keys.dead, "MAXLEN", "~", "1000000", id]
        for (name, value) in job where !(tokens != nil && (name == JobField.token || name == JobField.tokens)) {
            arguments += [name, value]
        }
        if let tokens {
            arguments += tokens.count == 1 ? [JobField.token, tokens[0]] : [JobField.tokens, tokens.joined(separator: ",")]
        }
        let failed = failedAt ?? StreamEntryID(id).map { Int64($0.milliseconds) } ?? HumanTime.nowMilliseconds()
        arguments += ["reason", reason, "message", message, "status", String(status), "attempts", String(attempts), "failed_at", String(failed)]
        return try command(arguments).string ?? ""
    }

    /// Adds a feedback entry as `FeedbackEntry.Draft.command` writes one.
    @discardableResult
    func addFeedback(token: String, topic: String = "com.example.herald", reason: String, timestamp: Int64? = nil, job: String = "1-0") throws -> String {
        var arguments = ["XADD", keys.feedback, "MAXLEN", "~", "1000000", "*", "token", token, "topic", topic, "reason", reason]
        if let timestamp { arguments += ["timestamp", String(timestamp)] }
        arguments += ["job", job]
        return try command(arguments).string ?? ""
    }

    // MARK: the herald binary

    struct Run {
        let status: Int32
        let stdout: String
        let stderr: String

        /// stdout parsed as one JSON object.
        func json() throws -> [String: Any] {
            let value = try JSONSerialization.jsonObject(with: Data(stdout.utf8))
            return try #require(value as? [String: Any], "not a JSON object: \(stdout)")
        }
    }

    /// `HERALD_BINARY`, else `herald` beside this test bundle (the same scratch path built it),
    /// else `<repo>/.build/debug/herald`.
    static func binary(filePath: String = #filePath) throws -> String {
        if let path = ProcessInfo.processInfo.environment["HERALD_BINARY"], !path.isEmpty {
            guard FileManager.default.isExecutableFile(atPath: path) else {
                throw QueueToolingFailure("HERALD_BINARY=\(path) is not an executable file")
            }
            return path
        }
        var candidates: [String] = []
        if let executable = Bundle.main.executablePath {
            var directory = (executable as NSString).deletingLastPathComponent
            // Linux: <scratch>/<triple>/debug/HeraldPackageTests.xctest; macOS: inside the .xctest bundle.
            for _ in 0..<4 {
                candidates.append((directory as NSString).appendingPathComponent("herald"))
                directory = (directory as NSString).deletingLastPathComponent
            }
        }
        let repository = URL(fileURLWithPath: filePath).deletingLastPathComponent().deletingLastPathComponent().deletingLastPathComponent()
        candidates.append(repository.appendingPathComponent(".build/debug/herald").path)
        for candidate in candidates where FileManager.default.isExecutableFile(atPath: candidate) {
            return candidate
        }
        throw QueueToolingFailure("the herald binary was not found (looked at \(candidates.joined(separator: ", "))); "
                           + "build it with `swift build --build-tests` or set HERALD_BINARY")
    }

    /// Starts `herald arguments…` with HERALD_REDIS pointing at this test's server.
    func start(_ arguments: [String], environment extra: [String: String] = [:]) throws -> (TestProcess, stdout: String, stderr: String) {
        runs += 1
        let out = directory.path("run\(runs).out")
        let err = directory.path("run\(runs).err")
        _ = FileManager.default.createFile(atPath: out, contents: nil)
        _ = FileManager.default.createFile(atPath: err, contents: nil)
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: try QueueToolingHarness.binary())
        process.arguments = arguments
        var environment = ProcessInfo.processInfo.environment
        environment["HERALD_REDIS"] = server.url
        environment["HERALD_QUEUE"] = nil
        environment["HERALD_QUEUES"] = nil
        environment["HERALD_SHARDS"] = nil
        // A TLS server's CA and client certificate travel as the operator's HERALD_* variables.
        environment["HERALD_REDIS_CA_FILE"] = server.tls?.clientTLS.caFile
        environment["HERALD_REDIS_CERT"] = server.tls?.clientTLS.certificateFile
        environment["HERALD_REDIS_KEY"] = server.tls?.clientTLS.keyFile
        for (name, value) in extra { environment[name] = value }
        process.environment = environment
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = try FileHandle(forWritingTo: URL(fileURLWithPath: out))
        process.standardError = try FileHandle(forWritingTo: URL(fileURLWithPath: err))
        try process.run()
        return (process, out, err)
    }

    /// Runs `herald arguments…` to the end (at most 60 s).
    func herald(_ arguments: String...) throws -> Run {
        try herald(arguments)
    }

    func herald(_ arguments: [String], environment: [String: String] = [:]) throws -> Run {
        let (process, out, err) = try start(arguments, environment: environment)
        let deadline = Date().addingTimeInterval(60)
        while process.isRunning && Date() < deadline { usleep(5_000) }
        if process.isRunning {
            process.terminate()
            process.waitUntilExit()
            throw QueueToolingFailure("herald \(arguments.joined(separator: " ")) did not finish within 60 s")
        }
        process.waitUntilExit()
        return Run(status: process.terminationStatus, stdout: try String(contentsOfFile: out, encoding: .utf8),
                   stderr: try String(contentsOfFile: err, encoding: .utf8))
    }

    /// Polls `condition` every 10 ms for up to `seconds`.
    func waitUntil(seconds: Double = 10, _ condition: () throws -> Bool) rethrows -> Bool {
        let deadline = Date().addingTimeInterval(seconds)
        while Date() < deadline {
            if try condition() { return true }
            usleep(10_000)
        }
        return try condition()
    }
}

struct QueueToolingFailure: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// Fields of a stream record as (name, text) pairs, for comparisons.
func queueToolingFieldTexts(_ fields: [(name: String, value: [UInt8])]) -> [String] {
    fields.map { "\($0.name)=\(String(decoding: $0.value, as: UTF8.self))" }
}
