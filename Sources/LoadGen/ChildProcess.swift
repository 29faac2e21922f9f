import CHeraldShims
import Glibc
import Transport

/// A program Herald starts and stops itself: the load generator's (and demo's) private
/// redis-server, the emulator and the worker processes.
///
/// Its standard output and error go to `logFile`; it does not inherit Herald's blocked signals.
/// Owned by whoever started it, which calls `terminate()`. If Herald dies without doing so (even
/// SIGKILL), the kernel sends the child SIGTERM (PR_SET_PDEATHSIG), so nothing is orphaned; that
/// signal follows the starting *thread*, so start children from the main thread (as the commands
/// do), never from a thread that ends first.
public final class ChildProcess {
    public let pid: pid_t
    public let name: String
    public let logFile: String
    private var exitStatus: Int32?

    /// Starts `arguments[0]` (a path, or a name searched in PATH), with `environment` added to
    /// (and overriding) this process's environment.
    public init(_ arguments: [String], logFile: String, environment: [String: String] = [:]) throws(LoadGenError) {
        name = arguments[0]
        self.logFile = logFile
        var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var cEnvironment: [UnsafeMutablePointer<CChar>?] = ChildProcess.mergedEnvironment(environment).map { strdup($0) } + [nil]
        defer { for pointer in cEnvironment { free(pointer) } }
        // The death signal follows the starting thread: one that ended early would take the child with it.
        precondition(herald_on_main_thread() != 0, "ChildProcess must be started from the main thread")
        var child: pid_t = 0
        let rc = herald_spawn_tied(arguments[0], &cArguments, &cEnvironment, logFile, &child)
        guard rc == 0 else {
            let hint = rc == ENOENT ? "; install it (make deps) and try again" : " (log \(logFile))"
            throw LoadGenError("cannot start \(arguments[0]): \(String(cString: strerror(rc)))\(hint)")
        }
        pid = child
    }

    /// This process's environment as `NAME=value` lines, with `additions` replacing same-named entries.
    static func mergedEnvironment(_ additions: [String: String]) -> [String] {
        var lines: [String] = []
        var index = 0
        while let entry = environ[index] {
            let line = String(cString: entry)
            let name = line.prefix { $0 != "=" }
            if additions[String(name)] == nil { lines.append(line) }
            index += 1
        }
        for (name, value) in additions.sorted(by: { $0.key < $1.key }) { lines.append("\(name)=\(value)") }
        return lines
    }

    /// True while the process runs.
    public var isRunning: Bool {
        if exitStatus != nil { return false }
        var status: Int32 = 0
        if waitpid(pid, &status, WNOHANG) == pid {
            exitStatus = status
            return false
        }
        return true
    }

    /// Waits until the log holds a line starting with `prefix` and returns the rest of it.
    public func waitForLine(startingWith prefix: String, timeoutMilliseconds: Int64 = 30_000) throws(LoadGenError) -> String {
        let line = try waitForLine(saying: "\(prefix)…", timeoutMilliseconds: timeoutMilliseconds) { $0.hasPrefix(prefix) }
        return String(line.dropFirst(prefix.count))
    }

    /// Waits until the log holds a line containing `text` and returns that line.
    public func waitForLine(containing text: String, timeoutMilliseconds: Int64 = 30_000) throws(LoadGenError) -> String {
        try waitForLine(saying: "…\(text)…", timeoutMilliseconds: timeoutMilliseconds) { $0.contains(text) }
    }

    private func waitForLine(saying description: String, timeoutMilliseconds: Int64, _ matches: (String) -> Bool) throws(LoadGenError) -> String {
        let deadline = EventLoop.monotonicMilliseconds() + timeoutMilliseconds
        while EventLoop.monotonicMilliseconds() < deadline {
            if let line = ChildProcess.lines(ofFile: logFile).first(where: matches) { return line }
            guard isRunning else {
                // It may have written the line and exited between the read above and this check.
                if let line = ChildProcess.lines(ofFile: logFile).first(where: matches) { return line }
                break
            }
            usleep(10_000)
        }
        let tail = ChildProcess.lines(ofFile: logFile).suffix(5).joined(separator: "\n  ")
        throw LoadGenError("\(name) did not say \"\(description)\" (\(isRunning ? "timed out" : "it exited")); its log \(logFile) ends:\n  \(tail)")
    }

    static func lines(ofFile path: String) -> [String] {
        guard let text = readProcFile(path) else { return [] }
        return text.split(separator: "\n").map(String.init)
    }

    /// Sends SIGTERM, waits up to `graceMilliseconds`, then SIGKILL. Returns the wait status.
    @discardableResult
    public func terminate(graceMilliseconds: Int64 = 10_000) -> Int32 {
        if let exitStatus { return exitStatus }
        kill(pid, SIGTERM)
        var status: Int32 = 0
        let deadline = EventLoop.monotonicMilliseconds() + graceMilliseconds
        while EventLoop.monotonicMilliseconds() < deadline {
            if waitpid(pid, &status, WNOHANG) == pid { exitStatus = status; return status }
            usleep(10_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
        exitStatus = status
        return status
    }
}

/// What went wrong in a load run, said for a person.
public struct LoadGenError: Error, CustomStringConvertible {
    public let description: String
    public init(_ description: String) { self.description = description }
}

/// A TCP port that was free a moment ago on 127.0.0.1.
public func freeLocalPort() throws -> Int {
    let (fd, port) = try Socket.listen(host: "127.0.0.1", port: 0)
    close(fd)
    return port
}
