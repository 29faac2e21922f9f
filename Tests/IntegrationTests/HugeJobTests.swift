import Foundation
import Glibc
import Queue
import Testing
import Transport

extension IntegrationTests {
    /// Producers who write enormous jobs: the worker's memory stays bounded whatever they write,
    /// the outsized jobs are dead-lettered with a bounded prefix, their full length and SHA-256,
    /// and the good jobs around them are delivered. The real `herald worker` binary, so its peak
    /// RSS (VmHWM) is its own.
    @Suite(.serialized)
    struct HugeJobs {
        @Test
        func fortyTenMegabyteJobsCostABoundedAmountOfMemory() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                let huge = 40, good = 200
                let token = WorkerHarness.deviceToken(7, prefix: "fe")
                let filler = String(repeating: "x", count: 10_000_000)
                let payload = #"{"aps":{"alert":"big"},"pad":""# + filler + #""}"#
                let payloadFile = bed.directory.path("huge-payload")
                try payload.write(toFile: payloadFile, atomically: true, encoding: .utf8)
                let sha = try OperationsHTTP.run("/usr/bin/sha256sum", [payloadFile]).1.split(separator: " ").first.map(String.init)
                _ = try await bed.client.xadd(keys.jobs, count: good / 2) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index))]
                }
                _ = try await bed.client.xadd(keys.jobs, count: huge) { _ in [("token", token), ("payload", payload)] }
                _ = try await bed.client.xadd(keys.jobs, count: good / 2) { index in
                    [("token", WorkerHarness.deviceToken(good + index)), ("payload", WorkerHarness.payload(good + index))]
                }

                let (letters, counts, peakKiB) = try await Self.drain(bed, emulator, keys)

                #expect(letters.count == huge, "\(letters.map(\.description))")
                for letter in letters {
                    #expect(letter["reason"] == "field_too_large")
                    #expect(letter["truncated_field"] == "payload")
                    #expect(letter["truncated_length"] == String(payload.utf8.count))
                    #expect(letter["truncated_sha256"] == sha, "the hash of the whole payload")
                    #expect(letter["payload"].map { payload.hasPrefix($0) && $0.utf8.count == 4096 } == true, "a 4 KiB prefix")
                    #expect(letter["message"]?.contains("holds \(payload.utf8.count) bytes") == true, "\(letter["message"] ?? "")")
                }
                #expect(counts.accepted == good && counts.acceptedUnique == good, "\(counts)")
                #expect(peakKiB < Self.rssBoundKiB(100), "peak RSS \(peakKiB / 1024) MiB with \(huge) jobs of 10 MB")
                print("huge jobs: \(huge) × 10 MB dead-lettered, \(good) delivered, worker peak RSS \(peakKiB / 1024) MiB")
            }
        }

        /// Valid jobs that are merely big (a 1 MiB field a backend attached): forty of them outgrow
        /// one reply's 32 MiB budget. The entries past the budget stay pending and are read again,
        /// fewer at a time; none is dead-lettered, all are delivered.
        @Test
        func bigValidJobsBeyondOneReplysBudgetAreAllDelivered() async throws {
            try await withOperationsBed { bed in
                let emulator = try await bed.startEmulator()
                let keys = QueueKeys()
                let count = 40
                let attachment = String(repeating: "y", count: 1 << 20)
                _ = try await bed.client.xadd(keys.jobs, count: count) { index in
                    [("token", WorkerHarness.deviceToken(index)), ("payload", WorkerHarness.payload(index)), ("backend_note", attachment)]
                }
                let (letters, counts, peakKiB) = try await Self.drain(bed, emulator, keys)
                #expect(letters.isEmpty, "\(letters.map(\.description))")
                #expect(counts.accepted == count && counts.acceptedUnique == count, "\(counts)")
                #expect(peakKiB < Self.rssBoundKiB(150), "peak RSS \(peakKiB / 1024) MiB")
            }
        }

        /// Runs `herald worker` until the queue is drained and stops it: the dead letters, the
        /// emulator's counts and the worker's peak RSS (VmHWM, KiB).
        static func drain(_ bed: OperationsBed, _ emulator: MockAPNsProcess, _ keys: QueueKeys) async throws
            -> (letters: [RedisClient.Entry], counts: EmulatorCounts, peakKiB: Int) {
            let (worker, _) = try bed.startWorker(["--redis", bed.redis.url, "--bundle-id", "com.example.app"] + emulator.workerArguments)
            try await waitFor("the worker drains the queue", timeout: .seconds(60), interval: .milliseconds(100)) {
                try worker.requireRunning()
                return try await bed.drained(keys)
            }
            let peakKiB = try status(of: worker.pid, "VmHWM")
            let letters = try await bed.client.entries(keys.dead)
            let counts = try await emulator.statistics()
            #expect(try await worker.terminate() == 0, "\(worker.outputTail())")
            return (letters, counts, peakKiB)
        }

        /// The RSS bound a test holds the worker to: AddressSanitizer's shadow memory and its
        /// quarantine of freed blocks (`make sanitize` sets HERALD_UNDER_ASAN) make the same work
        /// take several times the memory, so there the bound is only a sanity check.
        static func rssBoundKiB(_ mebibytes: Int) -> Int {
            ProcessInfo.processInfo.environment["HERALD_UNDER_ASAN"] == nil ? mebibytes * 1024 : mebibytes * 1024 * 8
        }

        /// A line of /proc/PID/status in kB.
        static func status(of pid: Int32, _ field: String) throws -> Int {
            let text = try String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8)
            guard let line = text.split(separator: "\n").first(where: { $0.hasPrefix(field + ":") }),
                  let value = line.split(separator: " ", omittingEmptySubsequences: true).dropFirst().first.flatMap({ Int($0) }) else {
                throw WaitTimeout(description: "no \(field) in /proc/\(pid)/status")
            }
            return value
        }
    }
}
