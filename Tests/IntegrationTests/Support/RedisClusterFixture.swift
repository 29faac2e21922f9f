import Foundation
import Glibc
import HeraldTestSupport
import Transport

/// A private Redis Cluster for one test: `masters` masters with one replica each, every node a
/// `redis-server --cluster-enabled yes` on a free port of 127.0.0.1 in its own directory, joined
/// with `redis-cli --cluster create … --cluster-replicas 1`, and waited for until every node
/// says `cluster_state:ok` and every replica's link to its master is up (so `WAIT 1` can
/// succeed). `--cluster-node-timeout 1000` makes a killed master's replica take over within a
/// few seconds. No snapshots, no append-only file: a killed master's data survives only on its
/// replica, as in production without persistence.
///
/// `redis-cli --cluster create` gives the first `masters` addresses the slots in equal ranges
/// (0–5460, 5461–10922, 10923–16383 for three) and makes the rest their replicas.
final class RedisClusterFixture: @unchecked Sendable {
    struct Node {
        let port: Int
        let directory: String
        var process: TestProcess?
    }

    let directory: TemporaryDirectory
    private(set) var nodes: [Node] = []
    let masters: Int

    /// `redis+cluster://` with every node as a seed.
    var url: String { "redis+cluster://" + nodes.map { "127.0.0.1:\($0.port)" }.joined(separator: ",") + "/" }
    /// One node's plain URL (for `--redis … --redis-cluster`).
    var firstNodeURL: String { "redis://127.0.0.1:\(nodes[0].port)" }
    var seeds: RedisClusterSeeds { try! RedisClusterSeeds(url: url) }

    init(masters: Int = 3) throws {
        self.masters = masters
        directory = try TemporaryDirectory(prefix: "herald-cluster")
        for index in 0..<(masters * 2) {
            var lastError: (any Error)? = nil
            var started: Node? = nil
            for _ in 0..<5 {
                let port = try RedisClusterFixture.freeNodePort()
                let nodeDirectory = directory.path("node-\(index)")
                try FileManager.default.createDirectory(atPath: nodeDirectory, withIntermediateDirectories: true)
                do {
                    started = Node(port: port, directory: nodeDirectory, process: try RedisClusterFixture.launch(port: port, directory: nodeDirectory))
                    break
                } catch {
                    lastError = error
                }
            }
            guard let started else {
                stop()
                throw lastError ?? RedisServerError("a cluster node did not start")
            }
            nodes.append(started)
        }
        do {
            try create()
            try waitUntilHealthy(timeoutMilliseconds: 60_000)
        } catch {
            stop()
            throw error
        }
    }

    deinit { stop() }

    /// A free port whose cluster bus port (port + 10000) is free too: Redis refuses a node
    /// port above 55535.
    static func freeNodePort() throws -> Int {
        for _ in 0..<200 {
            let port = try RedisServer.freePort()
            guard port <= 55535 else { continue }
            guard let (fd, _) = try? Socket.listen(host: "127.0.0.1", port: port + 10000) else { continue }
            close(fd)
            return port
        }
        throw RedisServerError("no free port pair (P, P + 10000) for a cluster node")
    }

    /// Starts one cluster node and waits until it answers PING.
    private static func launch(port: Int, directory nodeDirectory: String) throws -> TestProcess {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: try RedisServer.executable())
        process.arguments = [
            "--port", String(port), "--bind", "127.0.0.1", "--dir", nodeDirectory, "--save", "", "--appendonly", "no",
            "--daemonize", "no", "--protected-mode", "no", "--logfile", nodeDirectory + "/redis.log",
            "--cluster-enabled", "yes", "--cluster-config-file", nodeDirectory + "/nodes.conf",
            "--cluster-node-timeout", "1000",
        ]
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = FileHandle.nullDevice
        process.standardError = FileHandle.nullDevice
        try process.run()
        let deadline = EventLoop.monotonicMilliseconds() + 10_000
        while EventLoop.monotonicMilliseconds() < deadline && process.isRunning && !RedisServer.ping(port: port) {
            usleep(10_000)
        }
        if process.isRunning && RedisServer.ping(port: port) { return process }
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
        throw RedisServerError("cluster node on port \(port) did not answer PING")
    }

    /// Starts a killed node again on its port with its `nodes.conf`: it rejoins the cluster, as
    /// a replica of whoever took its slots over, and copies its data from that master.
    func restart(port: Int) throws {
        guard let index = nodes.firstIndex(where: { $0.port == port }), nodes[index].process == nil else { return }
        nodes[index].process = try RedisClusterFixture.launch(port: port, directory: nodes[index].directory)
    }

    private func create() throws {
        let output = try RedisClusterFixture.redisCLI(
            ["--cluster", "create"] + nodes.map { "127.0.0.1:\($0.port)" } + ["--cluster-replicas", "1", "--cluster-yes"])
        guard output.status == 0 else {
            throw RedisServerError("redis-cli --cluster create failed (\(output.status)):\n\(output.text.suffix(2000))")
        }
    }

    /// Runs `redis-cli` with `arguments`; its exit status and output.
    static func redisCLI(_ arguments: [String]) throws -> (status: Int32, text: String) {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: try RedisServer.redisTool("redis-cli", package: "redis-tools"))
        process.arguments = arguments
        let pipe = Pipe()
        process.standardOutput = pipe
        process.standardError = pipe
        process.standardInput = FileHandle.nullDevice
        try process.run()
        let data = pipe.fileHandleForReading.readDataToEndOfFile()
        process.waitUntilExit()
        return (process.terminationStatus, String(decoding: data, as: UTF8.self))
    }

    /// `redis-cli -p PORT args…` output, or nil when the node did not answer.
    func ask(_ port: Int, _ arguments: [String]) -> String? {
        guard let output = try? RedisClusterFixture.redisCLI(["-h", "127.0.0.1", "-p", String(port)] + arguments), output.status == 0 else {
            return nil
        }
        return output.text
    }

    /// Waits until every running node says `cluster_state:ok`, every running replica's master
    /// link is up, and the running masters cover all slots.
    func waitUntilHealthy(timeoutMilliseconds: Int64) throws {
        let deadline = EventLoop.monotonicMilliseconds() + timeoutMilliseconds
        var last = ""
        while EventLoop.monotonicMilliseconds() < deadline {
            if let problem = healthProblem() { last = problem } else { return }
            usleep(100_000)
        }
        throw RedisServerError("the cluster did not become healthy within \(timeoutMilliseconds) ms: \(last)")
    }

    /// Why the cluster is not healthy yet, or nil.
    func healthProblem() -> String? {
        var mastersUp = 0
        for node in nodes where node.process?.isRunning == true {
            guard let info = ask(node.port, ["CLUSTER", "INFO"]) else { return "node \(node.port) does not answer" }
            guard info.contains("cluster_state:ok") else { return "node \(node.port): \(info.prefix(200))" }
            guard let replication = ask(node.port, ["INFO", "replication"]) else { return "node \(node.port) does not answer INFO" }
            if replication.contains("role:slave") {
                guard replication.contains("master_link_status:up") else { return "replica \(node.port): master link not up" }
            } else {
                mastersUp += 1
            }
        }
        return mastersUp >= masters ? nil : "\(mastersUp) masters up, \(masters) expected"
    }

    /// The slot map as a running node reports it (`CLUSTER SLOTS`, read by Herald's parser; the
    /// worker itself uses `CLUSTER SHARDS`, so the two readings check each other).
    func map() throws -> RedisClusterMap {
        var last: (any Error)? = nil
        for node in nodes where node.process?.isRunning == true {
            do {
                let client = try BlockingRESP(port: node.port)
                defer { client.close() }
                return try RedisClusterMap.fromSlots(try client.command(["CLUSTER", "SLOTS"]), askedHost: "127.0.0.1")
            } catch {
                last = error
            }
        }
        throw RedisServerError("no cluster node answered CLUSTER SLOTS: \(last.map { "\($0)" } ?? "none running")")
    }

    /// The port of the master serving `slot` now.
    func masterPort(ofSlot slot: Int) throws -> Int {
        guard let node = try map().owner(ofSlot: slot) else { throw RedisServerError("no master serves slot \(slot)") }
        return node.port
    }

    /// SIGKILL of the node on `port`: no shutdown, connections reset.
    func kill(port: Int) {
        guard let index = nodes.firstIndex(where: { $0.port == port }), let process = nodes[index].process else { return }
        nodes[index].process = nil
        if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
        process.waitUntilExit()
    }

    /// The redis-server process ids still running (for CPU accounting).
    var pids: [Int32] { nodes.compactMap { $0.process?.processIdentifier } }

    func stop() {
        for index in nodes.indices {
            guard let process = nodes[index].process else { continue }
            nodes[index].process = nil
            if process.isRunning { Glibc.kill(process.processIdentifier, SIGKILL) }
            process.waitUntilExit()
        }
    }

    /// The last lines of every node's log (for failure messages).
    func logs(_ characters: Int = 1500) -> String {
        nodes.map { node in
            let text = (try? String(contentsOfFile: node.directory + "/redis.log", encoding: .utf8)) ?? ""
            return "node \(node.port):\n\(text.suffix(characters))"
        }.joined(separator: "\n")
    }
}

/// A tiny blocking RESP client on Herald's own `RedisConnection` (a private loop turned here),
/// for the fixture's questions to one node.
final class BlockingRESP: RedisConnectionDelegate {
    let loop: EventLoop
    let connection: RedisConnection
    private var closedError: RedisError?

    init(port: Int) throws {
        loop = try EventLoop()
        connection = RedisConnection(loop: loop, endpoint: RedisEndpoint(host: "127.0.0.1", port: port))
        connection.delegate = self
        connection.connect()
    }

    func command(_ arguments: [String], timeoutMilliseconds: Int64 = 5_000) throws -> RedisReply {
        var result: Result<RedisReply, RedisError>? = nil
        let loop = self.loop
        connection.send(arguments) { answer in
            result = answer
            loop.stop()
        }
        var timedOut = false
        let timer = loop.schedule(afterMilliseconds: timeoutMilliseconds) {
            timedOut = true
            loop.stop()
        }
        while result == nil && closedError == nil && !timedOut { loop.run() }
        loop.cancel(timer)
        switch result {
        case .success(let reply)?: return reply
        case .failure(let error)?: throw error
        case nil: throw closedError ?? RedisError.connectionLost("no answer to \(arguments.first ?? "")")
        }
    }

    func close() {
        connection.delegate = nil
        connection.close()
    }

    func redisConnectionIsReady(_ connection: RedisConnection) {}
    func redisConnectionClosed(_ connection: RedisConnection, error: RedisError) {
        closedError = error
        loop.stop()
    }
}
