import Foundation
import Glibc
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// A worker that runs out of file descriptors (its limit lowered under it with `prlimit`, then
    /// idle connections to its metrics port eat what is left) while Redis drops it: the metrics
    /// listener backs off instead of spinning, the Redis reconnect fails cleanly (EMFILE) instead
    /// of trapping, and once descriptors are free again the worker reconnects and delivers.
    @Suite(.serialized)
    struct DescriptorExhaustion {
        @Test
        func outOfDescriptorsTheWorkerNeitherCrashesNorSpinsAndRecovers() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                _ = try await bed.client.xadd(keys.jobs, count: 100) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                let (worker, http) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app", "--log-format", "logfmt",
                                                          "--log-level", "debug"]
                                                         + emulator.workerArguments)
                try await waitFor("the worker drains the first jobs", timeout: .seconds(30), interval: .milliseconds(100)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                try await waitFor("/readyz says ready", timeout: .seconds(10), interval: .milliseconds(100)) { try http.status("/readyz") == 200 }

                // Leave the worker two descriptors, then take them with idle metrics connections.
                let open = try FileManager.default.contentsOfDirectory(atPath: "/proc/\(worker.pid)/fd").count
                let limit = open + 2
                let (status, output) = try OperationsHTTP.run("/usr/bin/prlimit", ["--pid", String(worker.pid), "--nofile=\(limit):\(limit)"])
                try #require(status == 0, "prlimit: \(output)")
                var idle: [Int32] = []
                defer { for fd in idle { Glibc.close(fd) } }
                for _ in 0..<20 { idle.append(try Self.connect(port: http.port)) }
                // Redis drops the worker's connections; reconnecting needs new descriptors.
                _ = try await bed.client.command("CLIENT", "KILL", "TYPE", "normal", "SKIPME", "yes")
                try await waitFor("the worker's Redis reconnect finds no descriptor", timeout: .seconds(15), interval: .milliseconds(50)) {
                    try worker.requireRunning()
                    return worker.stderr.contains("Too many open files")
                }
                // Now out of descriptors on both sides: it must wait, not spin (a 2 s window of CPU time).
                let cpuBefore = try Self.cpuTicks(worker.pid)
                try await Task.sleep(for: .seconds(2))
                let cpuAfter = try Self.cpuTicks(worker.pid)
                try worker.requireRunning()
                let ticksPerSecond = Int(sysconf(Int32(_SC_CLK_TCK)))
                // Spinning on EMFILE burns a whole core (2 s of CPU in 2 s); backing off, almost nothing.
                #expect(cpuAfter - cpuBefore < ticksPerSecond / 2, "the worker used \(cpuAfter - cpuBefore) ticks in 2 s")

                // Descriptors back: the worker reconnects to Redis by itself and delivers new jobs.
                for fd in idle { Glibc.close(fd) }
                idle.removeAll()
                _ = try OperationsHTTP.run("/usr/bin/prlimit", ["--pid", String(worker.pid), "--nofile=4096:4096"])
                _ = try await bed.client.xadd(keys.jobs, count: 100) { index in
                    [("token", WorkerHarness.deviceToken(100 + index)), ("payload", WorkerHarness.payload(100 + index))]
                }
                try await waitFor("the worker reconnects and drains the new jobs", timeout: .seconds(60), interval: .milliseconds(200)) {
                    try worker.requireRunning()
                    return try await bed.drained(keys)
                }
                // The listener did run out of descriptors (and backed off): its own counter says so.
                let scrape = try await http.scrape(until: "/metrics counts accepts that found no descriptor", process: worker) {
                    $0.count("herald_metrics_http_accept_out_of_descriptors_total") > 0
                }
                #expect(scrape.count("herald_metrics_http_accept_out_of_descriptors_total") < 200, "backed off, not spun")
                let counts = try await emulator.statistics()
                #expect(counts.accepted == 200 && counts.acceptedUnique == 200, "\(counts)")
                #expect(try await bed.length(keys.dead) == 0)
                #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
            }
        }

        static func connect(port: Int) throws -> Int32 {
            let fd = socket(AF_INET, Int32(SOCK_STREAM.rawValue), 0)
            guard fd >= 0 else { throw WaitTimeout(description: "socket: \(errno)") }
            var address = sockaddr_in()
            address.sin_family = sa_family_t(AF_INET)
            address.sin_port = in_port_t(UInt16(port).bigEndian)
            address.sin_addr.s_addr = inet_addr("127.0.0.1")
            let result = withUnsafePointer(to: &address) {
                $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { Glibc.connect(fd, $0, socklen_t(MemoryLayout<sockaddr_in>.size)) }
            }
            guard result == 0 else { Glibc.close(fd); throw WaitTimeout(description: "connect: \(errno)") }
            return fd
        }

        /// utime + stime of a process, in clock ticks.
        static func cpuTicks(_ pid: Int32) throws -> Int {
            let stat = try String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8)
            // Fields after the command name (which may hold spaces) start after the last ')'.
            guard let close = stat.lastIndex(of: ")") else { return 0 }
            let fields = stat[stat.index(after: close)...].split(separator: " ")
            // utime and stime are fields 14 and 15 of the whole line: 12 and 13 after the name.
            return (Int(fields[11]) ?? 0) + (Int(fields[12]) ?? 0)
        }
    }
}
