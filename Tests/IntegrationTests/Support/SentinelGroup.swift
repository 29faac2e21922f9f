import Foundation
import Glibc
import HeraldTestSupport
import Queue
import Transport

/// A Redis Sentinel deployment for one test, all real processes on free ports of 127.0.0.1: a
/// master, `replicas` replicas (`--replicaof`) and `sentinels` sentinels (`redis-server
/// sentinel.conf --sentinel`, which Debian's redis-server package runs) monitoring the master as
/// `SentinelGroup.masterName` with a quorum of 2, a 1 s down-after and a short failover timeout,
/// so a killed master is replaced within a few seconds. Each process has its own directory and
/// log; every process is killed when the test ends (`stop()` or deinit).
final class SentinelGroup: @unchecked Sendable {
    static let masterName = "herald-master"

    let directory: TemporaryDirectory
    /// The data servers: index 0 starts as the master, the others as its replicas.
    private(set) var servers: [RedisProcess] = []
    private(set) var sentinels: [RedisProcess] = []
    let sentinelPassword: String?

    /// Starts the master, the replicas and the sentinels, and waits until the sentinels know
    /// every replica and one another and every replica is in sync (so a failover can happen).
    init(replicas: Int = 1, sentinels sentinelCount: Int = 3, downAfterMilliseconds: Int = 1000,
         failoverTimeoutMilliseconds: Int = 4000, sentinelPassword: String? = nil) async throws {
        directory = try TemporaryDirectory(prefix: "herald-sentinel")
        self.sentinelPassword = sentinelPassword
        let master = try RedisProcess.start(name: "redis-0", directory: directory) { port, dir in
            RedisProcess.dataArguments(port: port, directory: dir)
        }
        servers.append(master)
        for index in 1...max(1, replicas) where replicas > 0 {
            servers.append(try RedisProcess.start(name: "redis-\(index)", directory: directory) { port, dir in
                RedisProcess.dataArguments(port: port, directory: dir) + ["--replicaof", "127.0.0.1", String(master.port)]
            })
        }
        for index in 0..<sentinelCount {
            sentinels.append(try RedisProcess.start(name: "sentinel-\(index)", directory: directory) { port, dir in
                var lines = [
                    "port \(port)", "bind 127.0.0.1", "daemonize no", "protected-mode no", "dir \(dir)",
                    "logfile \(dir)/redis.log",
                    "sentinel monitor \(SentinelGroup.masterName) 127.0.0.1 \(master.port) 2",
                    "sentinel down-after-milliseconds \(SentinelGroup.masterName) \(downAfterMilliseconds)",
                    "sentinel failover-timeout \(SentinelGroup.masterName) \(failoverTimeoutMilliseconds)",
                    "sentinel parallel-syncs \(SentinelGroup.masterName) 1",
                ]
                if let sentinelPassword {
                    lines.append("requirepass \(sentinelPassword)")
                    // The sentinels talk to one another with the same password.
                    lines.append("sentinel sentinel-pass \(sentinelPassword)")
                }
                let path = "\(dir)/sentinel.conf"
                try (lines.joined(separator: "\n") + "\n").write(toFile: path, atomically: true, encoding: .utf8)
                return [path, "--sentinel"]
            })
        }
        try await waitUntilMonitored()
    }

    deinit { stop() }

    func stop() {
        for process in sentinels + servers { process.kill() }
    }

    /// `127.0.0.1:P1,127.0.0.1:P2,…`, for `--sentinel`.
    var sentinelList: String { sentinels.map { "127.0.0.1:\($0.port)" }.joined(separator: ",") }

    var configuration: SentinelConfiguration {
        SentinelConfiguration(sentinels: sentinels.map { .init(host: "127.0.0.1", port: $0.port) },
                              masterName: SentinelGroup.masterName, password: sentinelPassword)
    }

    /// A one-shot client to `port` (a data server, or a sentinel with `sentinel: true`).
    func client(port: Int, sentinel: Bool = false) throws -> BlockingRedisClient {
        try BlockingRedisClient(endpoint: RedisEndpoint(host: "127.0.0.1", port: port, password: sentinel ? sentinelPassword : nil))
    }

    /// Runs one command against `port`; nil when it cannot be reached.
    func ask(port: Int, sentinel: Bool = false, _ command: [RedisArgument]) -> RedisReply? {
        guard let client = try? client(port: port, sentinel: sentinel) else { return nil }
        return try? client.pipeline([command], timeoutMilliseconds: 2_000).first
    }

    /// The master every reachable sentinel names, when they agree; nil otherwise.
    func agreedMasterPort() -> Int? {
        var ports = Set<Int>()
        for sentinel in sentinels where sentinel.isRunning {
            guard case .array(let parts)? = ask(port: sentinel.port, sentinel: true,
                                                ["SENTINEL", "get-master-addr-by-name", .text(SentinelGroup.masterName)]),
                  parts.count == 2, let port = parts[1].string.flatMap(Int.init) else { return nil }
            ports.insert(port)
        }
        return ports.count == 1 ? ports.first : nil
    }

    /// `ROLE`'s first element (`master`, `slave`), or nil when unreachable.
    func role(port: Int) -> String? {
        guard case .array(let parts)? = ask(port: port, ["ROLE"]) else { return nil }
        return parts.first?.string
    }

    /// The data server process listening on `port`.
    func server(port: Int) -> RedisProcess? { servers.first { $0.port == port } }

    /// Waits until each sentinel knows the master, every replica and the other sentinels, and
    /// every replica's link to the master is up.
    private func waitUntilMonitored() async throws {
        let replicaCount = servers.count - 1
        let sentinelCount = sentinels.count
        try await waitFor("the sentinels monitor the master with \(replicaCount) replicas and see each other", timeout: .seconds(60),
                          interval: .milliseconds(200)) {
            for sentinel in self.sentinels {
                guard case .array(let replicas)? = self.ask(port: sentinel.port, sentinel: true,
                                                            ["SENTINEL", "replicas", .text(SentinelGroup.masterName)]),
                      replicas.count == replicaCount,
                      case .array(let peers)? = self.ask(port: sentinel.port, sentinel: true,
                                                         ["SENTINEL", "sentinels", .text(SentinelGroup.masterName)]),
                      peers.count == sentinelCount - 1 else { return false }
                // A replica the sentinel still sees as down (s_down) cannot be promoted.
                for replica in replicas {
                    let map = RedisReplyReader.map(replica)
                    guard let flags = map["flags"]?.string, flags == "slave" else { return false }
                }
            }
            for replica in self.servers.dropFirst() {
                guard case .bulk(let bytes)? = self.ask(port: replica.port, ["INFO", "replication"]),
                      String(decoding: bytes, as: UTF8.self).contains("master_link_status:up") else { return false }
            }
            return true
        }
    }

    /// Waits until the sentinels agree on a master other than `oldPort` and it says it is one;
    /// returns its port.
    func waitForFailover(from oldPort: Int, timeout: Duration = .seconds(60)) async throws -> Int {
        var promoted = 0
        try await waitFor("the sentinels promote a replica of the master on port \(oldPort)\n\(logTails())", timeout: timeout,
                          interval: .milliseconds(100)) {
            guard let port = self.agreedMasterPort(), port != oldPort, self.role(port: port) == "master" else { return false }
            promoted = port
            return true
        }
        return promoted
    }

    /// The last lines of every process' log, for failure messages.
    func logTails(_ characters: Int = 1500) -> String {
        (servers + sentinels).map { "\($0.name) (port \($0.port)):\n\($0.logTail(characters))" }.joined(separator: "\n")
    }
}

/// One `redis-server` process (a data server or a sentinel) on a free port, in a directory of its
/// own under the group's, logging to `redis.log` there.
final class RedisProcess: @unchecked Sendable {
    let name: String
    let port: Int
    let directory: String
    private var process: TestProcess?

    private init(name: String, port: Int, directory: String, process: TestProcess) {
        self.name = name
        self.port = port
        self.directory = directory
        self.process = process
    }

    deinit { kill() }

    /// The flags of a plain data server: no snapshots, no protected mode, its own log.
    static func dataArguments(port: Int, directory: String) -> [String] {
        ["--port", String(port), "--bind", "127.0.0.1", "--dir", directory, "--save", "", "--appendonly", "no",
         "--daemonize", "no", "--protected-mode", "no", "--logfile", "\(directory)/redis.log"]
    }

    /// Starts `redis-server` with the arguments `arguments(port, directory)` makes (it may write a
    /// config file there) on a free port, and waits until it answers PING; a taken port is retried.
    static func start(name: String, directory parent: TemporaryDirectory,
                      arguments: (Int, String) throws -> [String]) throws -> RedisProcess {
        let directory = parent.path(name)
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        var lastError: (any Error)? = nil
        for _ in 0..<5 {
            let port = try RedisServer.freePort()
            let process = TestProcess()
            process.executableURL = URL(fileURLWithPath: try RedisServer.executable())
            process.arguments = try arguments(port, directory)
            process.standardInput = FileHandle.nullDevice
            process.standardOutput = FileHandle.nullDevice
            process.standardError = FileHandle.nullDevice
            try process.run()
            let deadline = EventLoop.monotonicMilliseconds() + 10_000
            while EventLoop.monotonicMilliseconds() < deadline && process.isRunning {
                // A sentinel with requirepass answers PING with NOAUTH: reachable is enough here.
                if RedisServer.ping(port: port) || RedisProcess.answers(port: port) {
                    return RedisProcess(name: name, port: port, directory: directory, process: process)
                }
                usleep(10_000)
            }
            if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
            let log = (try? String(contentsOfFile: "\(directory)/redis.log", encoding: .utf8)) ?? ""
            lastError = RedisServerError("\(name) on port \(port) did not start within 10 s; its log:\n\(log.suffix(2000))")
        }
        throw lastError ?? RedisServerError("\(name) did not start")
    }

    /// Whether something accepts connections on `port` and answers with a RESP error or status.
    private static func answers(port: Int) -> Bool {
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
        return count > 0 && (buffer[0] == UInt8(ascii: "-") || buffer[0] == UInt8(ascii: "+"))
    }

    var isRunning: Bool { process?.isRunning ?? false }

    /// Sends `signal` (SIGSTOP: a server that stalls with its connections open; SIGCONT).
    func signal(_ signal: Int32) {
        if let process { Glibc.kill(process.processIdentifier, signal) }
    }

    /// SIGKILL (no shutdown, connections reset) and reap.
    func kill() {
        guard let process else { return }
        self.process = nil
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    func logTail(_ characters: Int = 2000) -> String {
        let text = (try? String(contentsOfFile: "\(directory)/redis.log", encoding: .utf8)) ?? ""
        return String(text.suffix(characters))
    }
}
