import Foundation
import Glibc
import HeraldTestSupport
import Testing

/// The suites start redis-server, workers, emulators and tools through `TestProcess`: what it
/// promises (exit status, signals, pipes that end, nothing of the test process's inherited) is
/// what the harnesses rely on.
@Suite struct TestProcessTests {
    static func output(_ arguments: [String], environment: [String: String]? = nil,
                       directory: String? = nil) throws -> (TestProcess, String) {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: arguments[0])
        process.arguments = Array(arguments.dropFirst())
        process.environment = environment
        if let directory { process.currentDirectoryURL = URL(fileURLWithPath: directory) }
        let pipe = Pipe()
        process.standardInput = FileHandle.nullDevice
        process.standardOutput = pipe
        try process.run()
        // Ends only if the parent's writing end was closed and the child exited.
        let text = String(decoding: pipe.fileHandleForReading.readDataToEndOfFile(), as: UTF8.self)
        process.waitUntilExit()
        return (process, text)
    }

    @Test func exitStatusAndSignalAreReportedApart() throws {
        let (exited, _) = try Self.output(["/bin/sh", "-c", "exit 3"])
        #expect(exited.terminationReason == .exit)
        #expect(exited.terminationStatus == 3)
        #expect(!exited.isRunning)

        let (killed, _) = try Self.output(["/bin/sh", "-c", "kill -TERM $$; sleep 5"])
        #expect(killed.terminationReason == .uncaughtSignal)
        #expect(killed.terminationStatus == SIGTERM)
    }

    @Test func terminateEndsARunningChild() throws {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: "/bin/sleep")
        process.arguments = ["30"]
        process.standardOutput = FileHandle.nullDevice
        try process.run()
        #expect(process.isRunning)
        #expect(process.processIdentifier > 0)
        process.terminate()
        process.waitUntilExit()
        #expect(process.terminationReason == .uncaughtSignal)
        #expect(process.terminationStatus == SIGTERM)
    }

    @Test func theChildKeepsNoDescriptorOfTheParentsButStandardIO() throws {
        // A pipe without close-on-exec, as C libraries and older code still make them.
        var leaky: [Int32] = [0, 0]
        #expect(pipe(&leaky) == 0)
        defer { close(leaky[0]); close(leaky[1]) }
        let (_, listing) = try Self.output(["/bin/ls", "/proc/self/fd"])
        let open = Set(listing.split(separator: "\n").compactMap { Int32($0) })
        #expect(open.isSuperset(of: [0, 1, 2]))
        #expect(!open.contains(leaky[0]) && !open.contains(leaky[1]), "inherited: \(open.sorted())")
        // ls's own directory descriptor is the only one above standard error.
        #expect(open.count <= 4, "\(open.sorted())")
    }

    @Test func noSignalIsBlockedOrIgnoredInTheChild() throws {
        // Blocked on this thread and ignored process-wide (Herald ignores SIGPIPE itself).
        var blocked = sigset_t()
        sigemptyset(&blocked)
        sigaddset(&blocked, SIGUSR1)
        var previous = sigset_t()
        pthread_sigmask(SIG_BLOCK, &blocked, &previous)
        defer { pthread_sigmask(SIG_SETMASK, &previous, nil) }
        let before = Glibc.signal(SIGPIPE, SIG_IGN)
        defer { Glibc.signal(SIGPIPE, before) }
        let (_, status) = try Self.output(["/bin/grep", "-E", "^Sig(Blk|Ign):", "/proc/self/status"])
        #expect(status.contains("SigBlk:\t0000000000000000"), "\(status)")
        // The standard signals, 1 to 31 (bit n - 1 for signal n); glibc keeps 32 and 33 for itself.
        let ignored = status.split(separator: "\n").first { $0.hasPrefix("SigIgn:") }
            .flatMap { UInt64($0.dropFirst("SigIgn:".count).trimmingCharacters(in: .whitespaces), radix: 16) }
        #expect(ignored.map { $0 & 0x7fff_ffff } == 0, "\(status)")
    }

    @Test func environmentAndDirectoryAreTheGivenOnes() throws {
        let (_, environment) = try Self.output(["/usr/bin/env"], environment: ["HERALD_PROBE": "yes"])
        #expect(environment == "HERALD_PROBE=yes\n")
        let (_, directory) = try Self.output(["/bin/pwd"], directory: "/tmp")
        #expect(directory == "/tmp\n")
        // nil: this process's own environment.
        let (_, inherited) = try Self.output(["/usr/bin/env"])
        #expect(inherited.contains("PATH="))
    }

    @Test func aMissingProgramIsAnError() {
        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: "/nonexistent/herald-no-such-program")
        #expect(throws: TestProcessError.self) { try process.run() }
        #expect(!process.isRunning)
    }
}
