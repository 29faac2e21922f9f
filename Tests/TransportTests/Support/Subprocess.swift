import Foundation
import HeraldTestSupport

/// What a finished subprocess left behind.
struct SubprocessResult: Sendable, CustomStringConvertible {
    /// The command line, for messages.
    let command: [String]
    /// The exit status, or the signal number if `terminatedBySignal`.
    let status: Int32
    let terminatedBySignal: Bool
    let standardOutput: String
    let standardError: String

    /// True if the process exited with status 0.
    var succeeded: Bool { !terminatedBySignal && status == 0 }

    /// Both streams, stdout first: for tools (like `openssl`) that report on either.
    var output: String { standardOutput + standardError }

    var description: String {
        let how = terminatedBySignal ? "killed by signal \(status)" : "exited with \(status)"
        return "`\(command.joined(separator: " "))` \(how)\nstdout:\n\(standardOutput)\nstderr:\n\(standardError)"
    }
}

/// Why a subprocess could not be run (as opposed to running and failing).
struct SubprocessError: Error, CustomStringConvertible {
    let description: String
}

/// Runs command-line tools from tests (`openssl`, `python3`, …) and captures what they print.
///
/// Output goes to files rather than pipes, so a chatty process can never block on a full pipe while
/// the test waits for it. Meant for short-lived tools: `run` waits for the process to exit.
enum Subprocess {
    /// Runs `executable` (an absolute path, or a name looked up in `PATH`) with `arguments`, feeding it
    /// `standardInput` if given, and waits for it to exit. `workingDirectory` defaults to the test's.
    static func run(
        _ executable: String,
        _ arguments: [String],
        standardInput: [UInt8]? = nil,
        workingDirectory: String? = nil,
        environment: [String: String]? = nil
    ) throws -> SubprocessResult {
        guard let resolved = executable.contains("/") ? executable : which(executable) else {
            throw SubprocessError(description: "`\(executable)` is not installed (not found in PATH)")
        }
        let scratch = try TemporaryDirectory(prefix: "herald-subprocess")
        let stdoutPath = scratch.path("stdout")
        let stderrPath = scratch.path("stderr")
        let stdinPath = try scratch.write(standardInput ?? [], to: "stdin")
        guard FileManager.default.createFile(atPath: stdoutPath, contents: nil),
            FileManager.default.createFile(atPath: stderrPath, contents: nil)
        else { throw SubprocessError(description: "cannot create output files in \(scratch.path)") }

        let process = TestProcess()
        process.executableURL = URL(fileURLWithPath: resolved)
        process.arguments = arguments
        if let workingDirectory { process.currentDirectoryURL = URL(fileURLWithPath: workingDirectory) }
        if let environment { process.environment = environment }
        let stdin = try FileHandle(forReadingFrom: URL(fileURLWithPath: stdinPath))
        let stdout = try FileHandle(forWritingTo: URL(fileURLWithPath: stdoutPath))
        let stderr = try FileHandle(forWritingTo: URL(fileURLWithPath: stderrPath))
        defer {
            try? stdin.close()
            try? stdout.close()
            try? stderr.close()
        }
        process.standardInput = stdin
        process.standardOutput = stdout
        process.standardError = stderr
        try process.run()
        process.waitUntilExit()

        return SubprocessResult(
            command: [executable] + arguments,
            status: process.terminationStatus,
            terminatedBySignal: process.terminationReason == .uncaughtSignal,
            standardOutput: String(decoding: try scratch.read("stdout"), as: UTF8.self),
            standardError: String(decoding: try scratch.read("stderr"), as: UTF8.self))
    }

    /// Like `run`, but throws (with both output streams in the message) unless the process exits with 0.
    @discardableResult
    static func runChecked(
        _ executable: String,
        _ arguments: [String],
        standardInput: [UInt8]? = nil,
        workingDirectory: String? = nil
    ) throws -> SubprocessResult {
        let result = try run(executable, arguments, standardInput: standardInput, workingDirectory: workingDirectory)
        guard result.succeeded else { throw SubprocessError(description: result.description) }
        return result
    }

    /// The absolute path of `name` in `PATH`, or nil if it is not installed.
    static func which(_ name: String) -> String? {
        let path = ProcessInfo.processInfo.environment["PATH"] ?? "/usr/local/bin:/usr/bin:/bin"
        for directory in path.split(separator: ":") {
            let candidate = (String(directory) as NSString).appendingPathComponent(name)
            if FileManager.default.isExecutableFile(atPath: candidate) { return candidate }
        }
        return nil
    }
}
