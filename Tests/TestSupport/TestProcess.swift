import CHeraldShims
import Foundation
import Glibc
import Synchronization

/// Why a `TestProcess` could not be started.
public struct TestProcessError: Error, CustomStringConvertible {
    public let description: String
}

/// A child process for tests: the subset of Foundation's `Process` the test suites use, started
/// with `posix_spawn` (`herald_spawn`).
///
/// Foundation's `Process.run()` on Linux reads `/proc/self/fd` to find the descriptors to close
/// and copies each directory entry's whole 256-byte name field, past the end of the record. When
/// a record ends a page that is followed by an unmapped one, the test process dies in `memcpy`
/// (seen once in a full local run of the suite). Here the child closes everything above standard
/// error with one `posix_spawn` file action instead.
///
/// Configure, `run()`, then poll `isRunning` or `waitUntilExit()` from any thread. Standard
/// streams: nil inherits this process's, `FileHandle.nullDevice` is /dev/null, a `FileHandle` is
/// used as is, and a `Pipe` gives the child one end and closes that end here (so reading the
/// other sees the end of file once the child exits).
public final class TestProcess: @unchecked Sendable {
    public enum TerminationReason: Sendable { case exit, uncaughtSignal }

    public var executableURL: URL?
    public var arguments: [String]?
    /// The child's whole environment; nil inherits this process's.
    public var environment: [String: String]?
    public var currentDirectoryURL: URL?
    public var standardInput: Any?
    public var standardOutput: Any?
    public var standardError: Any?

    private struct State {
        var pid: pid_t = 0
        /// The raw wait status once the child has been reaped.
        var waitStatus: Int32?
    }
    private let state = Mutex(State())

    public init() {}

    /// The child's process id; 0 before `run()`.
    public var processIdentifier: Int32 { state.withLock { $0.pid } }

    public func run() throws {
        guard let executableURL else { throw TestProcessError(description: "TestProcess.run(): no executableURL") }
        precondition(processIdentifier == 0, "TestProcess.run() called twice")
        let path = executableURL.path
        var opened: [Int32] = []
        var closeAfterSpawn: [FileHandle] = []
        defer { for fd in opened { close(fd) } }
        func descriptor(_ stream: Any?, standard: Int32, reading: Bool) throws -> Int32 {
            switch stream {
            case nil:
                return standard
            case let pipe as Pipe:
                let end = reading ? pipe.fileHandleForReading : pipe.fileHandleForWriting
                closeAfterSpawn.append(end)
                return end.fileDescriptor
            case let handle as FileHandle where handle === FileHandle.nullDevice:
                let fd = open("/dev/null", O_RDWR | O_CLOEXEC)
                guard fd >= 0 else { throw TestProcessError(description: "cannot open /dev/null: \(String(cString: strerror(errno)))") }
                opened.append(fd)
                return fd
            case let handle as FileHandle:
                return handle.fileDescriptor
            default:
                throw TestProcessError(description: "TestProcess: a standard stream must be nil, a FileHandle or a Pipe")
            }
        }
        let input = try descriptor(standardInput, standard: 0, reading: true)
        let output = try descriptor(standardOutput, standard: 1, reading: false)
        let errors = try descriptor(standardError, standard: 2, reading: false)

        var cArguments: [UnsafeMutablePointer<CChar>?] = ([path] + (arguments ?? [])).map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        let lines = environment.map { $0.map { "\($0.key)=\($0.value)" } } ?? TestProcess.inheritedEnvironment()
        var cEnvironment: [UnsafeMutablePointer<CChar>?] = lines.map { strdup($0) } + [nil]
        defer { for pointer in cEnvironment { free(pointer) } }

        var child: pid_t = 0
        let rc: Int32
        if let directory = currentDirectoryURL?.path {
            rc = herald_spawn(path, &cArguments, &cEnvironment, directory, input, output, errors, &child)
        } else {
            rc = herald_spawn(path, &cArguments, &cEnvironment, nil, input, output, errors, &child)
        }
        guard rc == 0 else {
            throw TestProcessError(description: "cannot start \(path): \(String(cString: strerror(rc)))")
        }
        state.withLock { $0.pid = child }
        for handle in closeAfterSpawn { try? handle.close() }
    }

    private static func inheritedEnvironment() -> [String] {
        var lines: [String] = []
        var index = 0
        while let entry = environ[index] {
            lines.append(String(cString: entry))
            index += 1
        }
        return lines
    }

    /// Reaps the child if it has exited (waiting for it when `blocking`); true once it has.
    private func reap(blocking: Bool) -> Bool {
        let pid: pid_t = state.withLock { $0.pid }
        precondition(pid != 0, "TestProcess: not started")
        while true {
            if state.withLock({ $0.waitStatus != nil }) { return true }
            var raw: Int32 = 0
            let got = waitpid(pid, &raw, blocking ? 0 : WNOHANG)
            if got == pid {
                state.withLock { $0.waitStatus = raw }
                return true
            }
            if got == 0 { return false }
            if errno == EINTR { continue }
            // ECHILD: another thread reaped it and is about to record the status.
            sched_yield()
        }
    }

    public var isRunning: Bool {
        guard processIdentifier != 0 else { return false }
        return !reap(blocking: false)
    }

    public func waitUntilExit() {
        _ = reap(blocking: true)
    }

    private var waitStatus: Int32 {
        guard let status = state.withLock({ $0.waitStatus }) else {
            preconditionFailure("TestProcess: the process has not exited (call waitUntilExit first)")
        }
        return status
    }

    /// How the process ended; only after it has.
    public var terminationReason: TerminationReason {
        let status = waitStatus
        return status & 0x7f == 0 ? .exit : .uncaughtSignal
    }

    /// The exit status, or the signal that ended it; only after it has ended.
    public var terminationStatus: Int32 {
        let status = waitStatus
        return status & 0x7f == 0 ? (status >> 8) & 0xff : status & 0x7f
    }

    /// Sends SIGTERM (if the process has not been reaped).
    public func terminate() {
        signal(SIGTERM)
    }

    /// Sends `signal` (if the process has not been reaped: its id may belong to another by then).
    public func signal(_ signal: Int32) {
        state.withLock { state in
            if state.pid != 0, state.waitStatus == nil { _ = Glibc.kill(state.pid, signal) }
        }
    }
}
