import Foundation
import Glibc
import HeraldTestSupport
import Queue
import Testing
import Transport

/// A `redis-server --requirepass` on a free port, for the tests of Herald's Redis login.
final class PasswordRedisServer: @unchecked Sendable {
    let directory: TemporaryDirectory
    let port: Int
    let password: String
    private let process: TestProcess

    init(password: String) throws {
        directory = try TemporaryDirectory(prefix: "herald-redis-auth")
        self.password = password
        port = try RedisServer.freePort()
        process = TestProcess()
        process.executableURL = URL(fileURLWithPath: try RedisServer.executable())
        // The password goes in a config file read from stdin, not on this process' command line.
        process.arguments = ["-"]
        let input = Pipe()
        process.standardInput = input
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let config = """
            port \(port)
            bind 127.0.0.1
            dir \(directory.path)
            save ""
            appendonly no
            protected-mode no
            logfile \(directory.path("redis.log"))
            requirepass \(password)

            """
        input.fileHandleForWriting.write(Data(config.utf8))
        try input.fileHandleForWriting.close()
    }

    func waitUntilUp() async throws {
        try await waitFor("redis-server --requirepass answers", timeout: .seconds(10), interval: .milliseconds(20)) {
            guard self.process.isRunning else { throw RedisServerError("redis-server exited") }
            let client = try BlockingRedisClient(endpoint: self.endpoint(password: self.password))
            return (try? client.run(["PING"], timeoutMilliseconds: 1_000).string) == "PONG"
        }
    }

    func endpoint(password: String?, database: Int = 0) -> RedisEndpoint {
        RedisEndpoint(host: "127.0.0.1", port: port, password: password, database: database)
    }

    var url: String { "redis://127.0.0.1:\(port)" }

    func stop() {
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }
}

extension IntegrationTests {
    /// Logging in to a Redis that wants a password: a connection is ready only once AUTH (and
    /// SELECT) succeeded; a refused password closes it with an error that says WRONGPASS, and the
    /// worker backs off more and more instead of "restoring" the connection every second.
    @Suite(.serialized)
    struct RedisAuthentication {
        final class Events: RedisConnectionDelegate {
            var ready = 0
            var closed: [RedisError] = []
            func redisConnectionIsReady(_ connection: RedisConnection) { ready += 1 }
            func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) { closed.append(error) }
        }

        /// Connects once on a private loop; the events once the connection is ready or closed.
        static func connect(_ endpoint: RedisEndpoint, sendBeforeReady: [String]? = nil) throws -> (Events, RedisReply?) {
            let loop = try EventLoop()
            let connection = RedisConnection(loop: loop, endpoint: endpoint)
            let events = Events()
            connection.delegate = events
            var reply: RedisReply? = nil
            if let sendBeforeReady { connection.send(sendBeforeReady) { if case .success(let value) = $0 { reply = value } } }
            connection.connect()
            for _ in 0..<5_000 where events.closed.isEmpty && (events.ready == 0 || (sendBeforeReady != nil && reply == nil)) {
                loop.schedule(afterMilliseconds: 1) { loop.stop() }
                loop.run()
            }
            connection.delegate = nil
            connection.close()
            return (events, reply)
        }

        @Test func aWrongPasswordIsNeverReadyAndSaysWRONGPASS() async throws {
            let redis = try PasswordRedisServer(password: "s3cret-right")
            defer { redis.stop() }
            try await redis.waitUntilUp()
            let (events, _) = try RedisAuthentication.connect(redis.endpoint(password: "s3cret-wrong"))
            #expect(events.ready == 0, "a connection whose AUTH was refused must never count as ready")
            let error = try #require(events.closed.first)
            guard case .authenticationFailed(let message) = error else {
                Issue.record("expected authenticationFailed, got \(error)")
                return
            }
            #expect(message.contains("WRONGPASS"))
            #expect(!error.description.contains("s3cret"))
        }

        @Test func noPasswordForARedisThatWantsOneSaysNOAUTH() async throws {
            let redis = try PasswordRedisServer(password: "s3cret-right")
            defer { redis.stop() }
            try await redis.waitUntilUp()
            let (events, _) = try RedisAuthentication.connect(redis.endpoint(password: nil))
            #expect(events.ready == 0)
            guard let error = events.closed.first, case .authenticationFailed(let message) = error else {
                Issue.record("expected authenticationFailed, got \(events.closed)")
                return
            }
            #expect(message.hasPrefix("NOAUTH"))
        }

        @Test func theRightPasswordAndDatabaseMakeItReadyAndCommandsSentEarlyFollowTheLogin() async throws {
            let redis = try PasswordRedisServer(password: "p@ss:w/rd")
            defer { redis.stop() }
            try await redis.waitUntilUp()
            let (events, reply) = try RedisAuthentication.connect(redis.endpoint(password: "p@ss:w/rd", database: 3),
                                                                  sendBeforeReady: ["CLIENT", "INFO"])
            #expect(events.closed.isEmpty, "\(events.closed)")
            #expect(events.ready == 1)
            #expect(reply?.string?.contains("db=3") == true, "\(String(describing: reply))")
        }

        @Test func theWorkerBacksOffMoreAndMoreOnAWrongPasswordAndIsNotReady() async throws {
            let redis = try PasswordRedisServer(password: "s3cret-right")
            defer { redis.stop() }
            try await redis.waitUntilUp()
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let wrongFile = bed.directory.path("redis-password-wrong")
                try "s3cret-wrong\n".write(toFile: wrongFile, atomically: true, encoding: .utf8)
                chmod(wrongFile, 0o600)
                let (worker, http) = try bed.startWorker(["--redis", redis.url, "--redis-password-file", wrongFile,
                                                          "--log-format", "logfmt", "--log-level", "debug", "--bundle-id", "com.example.app"]
                                                         + emulator.workerArguments)
                var delays: [Int] = []
                try await waitFor("the worker logged three refused logins", timeout: .seconds(20), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    delays = worker.stderr.split(separator: "\n")
                        .filter { $0.contains("Redis connection down") || $0.contains("Redis connection attempt failed") }
                        .compactMap { line in
                            line.split(separator: " ").first { $0.hasPrefix("reconnect_ms=") }
                                .flatMap { Int($0.dropFirst("reconnect_ms=".count).filter(\.isNumber)) }
                        }
                    return delays.count >= 3
                }
                // Backoff 1 s, 2 s, 4 s (±20 %): it grows, as it never did when AUTH was not awaited.
                #expect(delays[1] > delays[0] && delays[2] > delays[1], "reconnect delays \(delays)")
                #expect(worker.stderr.contains("WRONGPASS"))
                let warnings = worker.stderr.split(separator: "\n").filter { $0.contains("Redis connection down") }
                #expect(warnings.count == 1, "one clear line at warning level, the retries at debug: \(warnings)")
                #expect(!worker.stderr.contains("Redis connection restored"))
                #expect(try http.status("/readyz") == 503)
                #expect(!worker.stderr.contains("s3cret"), "a log line holds the password")
                #expect(!worker.stdout.contains("s3cret"))
                let commandLine = (try? String(contentsOfFile: "/proc/\(worker.pid)/cmdline", encoding: .utf8)) ?? ""
                #expect(!commandLine.contains("s3cret"))
                _ = try await worker.terminate()

                // The same worker with the password in its environment: ready.
                let goodEnvironment = try bed.start(["worker", "--metrics-port", "0", "--redis", redis.url, "--bundle-id", "com.example.app"]
                                                    + emulator.workerArguments, environment: ["HERALD_REDIS_PASSWORD": "s3cret-right"])
                var port = 0
                try await waitFor("the worker prints its metrics port", timeout: .seconds(15)) {
                    try goodEnvironment.requireRunning()
                    guard let line = goodEnvironment.stdout.split(separator: "\n").first(where: { $0.hasPrefix("metrics on ") }),
                          let value = Int(line.dropFirst("metrics on ".count)) else { return false }
                    port = value
                    return true
                }
                try await waitFor("/readyz answers 200 once logged in", timeout: .seconds(15)) {
                    try goodEnvironment.requireRunning()
                    return (try? OperationsHTTP(port: port).status("/readyz")) == 200
                }
                #expect(!goodEnvironment.stderr.contains("s3cret"))
            }
        }
    }
}
