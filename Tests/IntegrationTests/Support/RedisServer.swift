import Foundation
import Glibc
import HeraldTestSupport
import Transport

/// A private `redis-server` for one test: a free port on 127.0.0.1, a fresh temporary directory,
/// no RDB snapshots, and (when asked) an append-only file so that a restart keeps the data.
/// Killed when the test ends (`stop()` or deinit). Tests reach it through `RedisClient`.
final class RedisServer: @unchecked Sendable {
    let directory: TemporaryDirectory
    let port: Int
    let appendOnly: Bool
    /// Set for a TLS-only server (`--port 0 --tls-port PORT`).
    let tls: TLS?
    private var process: TestProcess?

    /// How a TLS-only server is set up: what it presents, whom it trusts, whether it requires
    /// client certificates (`--tls-auth-clients yes`), and what its clients trust and present.
    struct TLS: Sendable {
        var certificates: TestCertificates
        var serverCertificate: String
        var serverKey: String
        var authClients: Bool
        /// What `endpoint` and `cliArguments` give clients: the CA and (with `authClients`) the
        /// client certificate.
        var clientTLS: RedisTLS

        init(certificates: TestCertificates, authClients: Bool = false) {
            self.certificates = certificates
            serverCertificate = certificates.serverCertificate
            serverKey = certificates.serverKey
            self.authClients = authClients
            clientTLS = RedisTLS(caFile: certificates.caFile,
                                 certificateFile: authClients ? certificates.clientCertificate : nil,
                                 keyFile: authClients ? certificates.clientKey : nil)
        }
    }

    var endpoint: RedisEndpoint { RedisEndpoint(host: "127.0.0.1", port: port, tls: tls?.clientTLS) }
    var url: String { "\(tls == nil ? "redis" : "rediss")://127.0.0.1:\(port)" }
    /// `--redis URL` and, for TLS, the CA and client-certificate flags: what `herald` needs.
    var cliArguments: [String] {
        var arguments = ["--redis", url]
        if let client = tls?.clientTLS {
            if let caFile = client.caFile { arguments += ["--redis-ca-file", caFile] }
            if let certificate = client.certificateFile, let key = client.keyFile {
                arguments += ["--redis-cert", certificate, "--redis-key", key]
            }
        }
        return arguments
    }

    /// Starts `redis-server` and waits until it answers PING (a TLS server: until it is ready).
    init(appendOnly: Bool = false, tls: TLS? = nil) throws {
        directory = try TemporaryDirectory(prefix: "herald-redis")
        self.appendOnly = appendOnly
        self.tls = tls
        // The free port is only free until someone takes it: try a few.
        var lastError: (any Error)? = nil
        for _ in 0..<5 {
            let candidate = try RedisServer.freePort()
            if let error = RedisServer.launch(port: candidate, directory: directory, appendOnly: appendOnly, tls: tls, into: &process) {
                lastError = error
                continue
            }
            port = candidate
            return
        }
        throw lastError ?? RedisServerError("redis-server did not start")
    }

    deinit { stop() }

    static func executable() throws -> String { try redisTool("redis-server", package: "redis-server") }

    /// The version of the `redis-server` the tests start, from `redis-server --version`
    /// ("Redis server v=6.2.14 …"); (0, 0) when it cannot be read.
    static let version: (major: Int, minor: Int) = {
        guard let path = try? executable() else { return (0, 0) }
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: path)
        process.arguments = ["--version"]
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = FileHandle.nullDevice
        process.standardInput = FileHandle.nullDevice
        guard (try? process.run()) != nil else { return (0, 0) }
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        guard let range = text.range(of: "v=") else { return (0, 0) }
        let numbers = text[range.upperBound...].prefix { $0.isNumber || $0 == "." }.split(separator: ".").compactMap { Int($0) }
        return numbers.count >= 2 ? (numbers[0], numbers[1]) : (0, 0)
    }()

    /// Redis 7.0 or later: `XINFO GROUPS` reports `lag` and `entries-read`, `XINFO STREAM`
    /// `entries-added`, `INFO commandstats` counts refused commands (`rejected_calls`) and
    /// subcommands, and ACL rules take `%W~` and `-command|subcommand`. On 6.2 Herald estimates
    /// the lag and bounds a lease by the stream's last id instead (docs/operations.md). A version
    /// that cannot be read counts as 7.0: an older server then fails the 7.0 checks loudly instead
    /// of a 7.0 server skipping them unnoticed.
    static var isRedis7: Bool { version.major >= 7 || version.major == 0 }

    /// `HERALD_TEST_REDIS_DIR`: a directory holding the `redis-server` and `redis-cli` the tests
    /// run instead of the ones on PATH (say a Redis 6.2 build). Set, it must hold them: a test run
    /// meant for another Redis never falls back to the installed one unnoticed. (PATH cannot do
    /// this: `swift test` puts the toolchain's directory, /usr/bin on Debian, first.)
    static let overrideDirectory: String? = ProcessInfo.processInfo.environment["HERALD_TEST_REDIS_DIR"].flatMap { $0.isEmpty ? nil : $0 }

    /// The path of `name` (`redis-server`, `redis-cli`): from `HERALD_TEST_REDIS_DIR` when it is
    /// set, else the first on PATH, /usr/bin or /usr/local/bin.
    static func redisTool(_ name: String, package: String) throws -> String {
        if let directory = overrideDirectory {
            let path = "\(directory)/\(name)"
            guard access(path, X_OK) == 0 else {
                throw RedisServerError("HERALD_TEST_REDIS_DIR is \(directory), which holds no executable \(name)")
            }
            return path
        }
        for directory in (ProcessInfo.processInfo.environment["PATH"] ?? "/usr/bin:/bin").split(separator: ":") + ["/usr/bin", "/usr/local/bin"] {
            let path = "\(directory)/\(name)"
            if access(path, X_OK) == 0 { return path }
        }
        throw RedisServerError("\(name) is not installed: run `make deps` (apt-get install \(package))")
    }

    /// (Re)starts the server on `port` with the same directory (and so the same append-only file).
    func start() throws {
        precondition(process == nil, "redis-server is already running")
        if let error = RedisServer.launch(port: port, directory: directory, appendOnly: appendOnly, tls: tls, into: &process) { throw error }
    }

    /// Starts redis-server and waits until it answers PING; the error, or nil with `process` set.
    private static func launch(port: Int, directory: TemporaryDirectory, appendOnly: Bool, tls: TLS?,
                               into slot: inout TestProcess?) -> (any Error)? {
        let process = TestProcess()
        do {
            process.executableURL = URL(fileURLWithPath: try RedisServer.executable())
            var arguments = [
                "--bind", "127.0.0.1", "--dir", directory.path, "--save", "",
                "--appendonly", appendOnly ? "yes" : "no", "--daemonize", "no", "--protected-mode", "no",
                "--logfile", directory.path("redis.log"),
            ]
            if let tls {
                arguments += ["--port", "0", "--tls-port", String(port), "--tls-cert-file", tls.serverCertificate,
                              "--tls-key-file", tls.serverKey, "--tls-ca-cert-file", tls.certificates.caFile,
                              "--tls-auth-clients", tls.authClients ? "yes" : "no"]
            } else {
                arguments += ["--port", String(port)]
            }
            process.arguments = arguments
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
        } catch {
            return error
        }
        let deadline = EventLoop.monotonicMilliseconds() + 10_000
        // A restart appends to the same log: only what this run wrote counts.
        let logOffset = (try? FileManager.default.attributesOfItem(atPath: directory.path("redis.log"))[.size] as? Int) ?? 0
        while EventLoop.monotonicMilliseconds() < deadline {
            if !process.isRunning { break }
            if tls == nil ? RedisServer.ping(port: port) : RedisServer.readyForTLS(port: port, log: directory.path("redis.log"), from: logOffset) {
                slot = process
                return nil
            }
            usleep(10_000)
        }
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        let log = (try? String(contentsOfFile: directory.path("redis.log"), encoding: .utf8)) ?? ""
        return RedisServerError("redis-server on port \(port) did not answer PING within 10 s; its log:\n\(log.suffix(2000))")
    }

    /// Kills the server at once (SIGKILL: no shutdown save, connections reset) and reaps it.
    func stop() {
        guard let process else { return }
        self.process = nil
        if process.isRunning { kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// SIGKILL, then a new server on the same port and directory. With `appendOnly` the data
    /// survives: Redis writes the append-only file before it answers a command.
    func restart() throws {
        stop()
        try start()
    }

    var isRunning: Bool { process?.isRunning ?? false }

    /// The running server's process id (for SIGSTOP and SIGCONT), nil when stopped.
    var pid: Int32? { process.map { $0.processIdentifier } }

    /// A free TCP port on 127.0.0.1 (bound to port 0 and released).
    static func freePort() throws -> Int {
        let (fd, port) = try Socket.listen(host: "127.0.0.1", port: 0)
        close(fd)
        return port
    }

    /// A TLS server is ready once it logged so and accepts a TCP connection (a plain PING cannot
    /// tell: it would get no answer).
    static func readyForTLS(port: Int, log: String, from offset: Int) -> Bool {
        guard let data = FileManager.default.contents(atPath: log), data.count > offset,
              String(decoding: data.dropFirst(offset), as: UTF8.self).contains("Ready to accept connections") else { return false }
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        return withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        } == 0
    }

    /// A blocking `PING` that is true only for `+PONG` (not `-LOADING` while the AOF loads).
    static func ping(port: Int) -> Bool {
        let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
        guard fd >= 0 else { return false }
        defer { close(fd) }
        var address = sockaddr_in()
        address.sin_family = sa_family_t(AF_INET)
        address.sin_port = in_port_t(UInt16(port).bigEndian)
        address.sin_addr.s_addr = inet_addr("127.0.0.1")
        var timeout = timeval(tv_sec: 1, tv_usec: 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, socklen_t(MemoryLayout<timeval>.size))
        let connected = withUnsafePointer(to: &address) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
        }
        guard connected == 0 else { return false }
        let request = Array("PING\r\n".utf8)
        guard write(fd, request, request.count) == request.count else { return false }
        var buffer = [UInt8](repeating: 0, count: 64)
        let count = read(fd, &buffer, buffer.count)
        return count >= 5 && Array(buffer[0..<5]) == Array("+PONG".utf8)
    }
}

struct RedisServerError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}
