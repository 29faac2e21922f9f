import Foundation
import Glibc
import HeraldAPI
import HeraldTestSupport
import Logging
import Queue
import Synchronization
import Transport

/// One API test's world: a private redis-server, `herald api`'s server in this process on a free
/// port (real HTTP on 127.0.0.1), a token file, and the test's own Redis client to check what the
/// API wrote. `close()` stops the server gracefully and ends the rest.
final class APIBed: @unchecked Sendable {
    static let token = "test-token-" + String(repeating: "a1", count: 16)
    let redis: RedisServer
    let client: RedisClient
    let directory: TemporaryDirectory
    let server: APIServer
    let port: Int
    private let task: Task<Void, any Error>

    var tokensFile: String { directory.path("tokens") }
    var auth: [(String, String)] { [("Authorization", "Bearer \(APIBed.token)")] }

    /// Starts Redis and the server (`redis`: an existing one, e.g. a worker bed's).
    init(redis existing: RedisServer? = nil, configure: (inout APIConfiguration) -> Void = { _ in }) async throws {
        signal(SIGPIPE, SIG_IGN)
        redis = try existing ?? RedisServer()
        client = try RedisClient(endpoint: redis.endpoint)
        directory = try TemporaryDirectory(prefix: "herald-api")
        try "# test tokens\n\(APIBed.token)\n".write(toFile: directory.path("tokens"), atomically: true, encoding: .utf8)
        var configuration = APIConfiguration(redis: redis.endpoint, tokensFile: directory.path("tokens"))
        configuration.host = "127.0.0.1"
        configuration.port = 0
        configuration.tokenPollMilliseconds = 100
        configure(&configuration)
        let tokens = try BearerTokens(path: configuration.tokensFile)
        var logger = Logger(label: "herald.it.api")
        logger.logLevel = ProcessInfo.processInfo.environment["HERALD_IT_LOG"].flatMap(Logger.Level.init(rawValue:)) ?? .critical
        let server = APIServer(configuration: configuration, tokens: tokens, logger: logger)
        self.server = server
        let bound = Mutex<Int>(0)
        task = Task { try await server.run(gracefulShutdownSignals: []) { port in bound.withLock { $0 = port } } }
        try await waitFor("the API server listens", timeout: .seconds(30)) { bound.withLock { $0 } != 0 }
        port = bound.withLock { $0 }
    }

    /// Stops the server (finishing requests in flight) and waits until `run` returned.
    func close() async {
        await server.shutdown()
        _ = await task.result
        client.shutdown()
    }

    /// Waits until `run` returned (after `server.shutdown()`); its error, if any.
    func waitForExit() async -> (any Error)? {
        if case .failure(let error) = await task.result { return error }
        return nil
    }

    func request(_ method: String, _ path: String, json: String, headers: [(String, String)]? = nil) async throws -> HTTPTestResponse {
        try await httpRequest(port: port, method, path, headers: headers ?? auth, json: json)
    }

    func get(_ path: String, headers: [(String, String)]? = nil) async throws -> HTTPTestResponse {
        try await httpRequest(port: port, "GET", path, headers: headers ?? auth)
    }
}

/// Runs `body` with a fresh bed and always closes it.
func withAPIBed<T>(configure: (inout APIConfiguration) -> Void = { _ in }, _ body: (APIBed) async throws -> T) async throws -> T {
    let bed = try await APIBed(configure: configure)
    do {
        let result = try await body(bed)
        await bed.close()
        return result
    } catch {
        await bed.close()
        throw error
    }
}

/// `herald api` as a child process (the real binary, signals and all), its output kept in a file.
final class APIProcess: @unchecked Sendable {
    let process: TestProcess
    let logPath: String
    let port: Int

    init(redis: RedisServer, tokensFile: String, directory: TemporaryDirectory, extra: [String] = []) throws {
        port = try RedisServer.freePort()
        process = TestProcess()
        process.executableURL = URL(fileURLWithPath: try WorkerHarness.heraldBinary())
        process.arguments = ["api", "--redis", redis.url, "--tokens-file", tokensFile, "--listen", "127.0.0.1:\(port)"] + extra
        process.environment = ProcessInfo.processInfo.environment.filter { !$0.key.hasPrefix("HERALD_") }
        logPath = directory.path("api.log")
        _ = FileManager.default.createFile(atPath: logPath, contents: nil)
        let log = try FileHandle(forWritingTo: URL(fileURLWithPath: logPath))
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = log
        process.standardError = log
        try process.run()
    }

    deinit {
        if process.isRunning {
            kill(process.processIdentifier, SIGKILL)
            process.waitUntilExit()
        }
    }

    func signal(_ signal: Int32) { kill(process.processIdentifier, signal) }

    var log: String { (try? String(contentsOfFile: logPath, encoding: .utf8)) ?? "" }

    /// Waits until /healthz answers.
    func waitUntilServing() async throws {
        try await waitFor("herald api serves /healthz", timeout: .seconds(30)) {
            if !self.process.isRunning { throw WaitTimeout(description: "herald api exited: \(self.log)") }
            return (try? await httpRequest(port: self.port, "GET", "/healthz"))?.status == 200
        }
    }

    /// The exit status once it ended, or nil at the deadline.
    func waitForExit(timeout: Duration) async throws -> Int32? {
        let ended = try await waitFor("herald api exits", timeout: timeout, failOnTimeout: false) { !self.process.isRunning }
        guard ended else { return nil }
        process.waitUntilExit()
        return process.terminationStatus
    }
}
