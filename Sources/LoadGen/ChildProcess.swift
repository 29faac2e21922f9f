import Glibc
import Transport

/// A program Herald starts and stops itself (the demo's private redis-server).
final class ChildProcess {
    let pid: pid_t
    let name: String

    /// Starts `arguments[0]` (searched in PATH) with its output sent to `logFile`.
    init(_ arguments: [String], logFile: String) throws {
        name = arguments[0]
        var actions = posix_spawn_file_actions_t()
        posix_spawn_file_actions_init(&actions)
        defer { posix_spawn_file_actions_destroy(&actions) }
        posix_spawn_file_actions_addopen(&actions, 1, logFile, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        posix_spawn_file_actions_adddup2(&actions, 1, 2)
        var attributes = posix_spawnattr_t()
        posix_spawnattr_init(&attributes)
        defer { posix_spawnattr_destroy(&attributes) }
        // The child must not inherit Herald's blocked SIGTERM/SIGINT.
        var empty = sigset_t()
        sigemptyset(&empty)
        posix_spawnattr_setsigmask(&attributes, &empty)
        posix_spawnattr_setflags(&attributes, Int16(POSIX_SPAWN_SETSIGMASK))
        var cArguments: [UnsafeMutablePointer<CChar>?] = arguments.map { strdup($0) } + [nil]
        defer { for pointer in cArguments { free(pointer) } }
        var child: pid_t = 0
        let rc = posix_spawnp(&child, arguments[0], &actions, &attributes, &cArguments, environ)
        guard rc == 0 else {
            throw DemoError("cannot start \(arguments[0]): \(String(cString: strerror(rc))); install it (make deps) and try again")
        }
        pid = child
    }

    /// True while the process runs.
    var isRunning: Bool {
        var status: Int32 = 0
        return waitpid(pid, &status, WNOHANG) == 0
    }

    func terminate() {
        kill(pid, SIGTERM)
        var status: Int32 = 0
        for _ in 0..<100 {
            if waitpid(pid, &status, WNOHANG) != 0 { return }
            usleep(20_000)
        }
        kill(pid, SIGKILL)
        waitpid(pid, &status, 0)
    }
}

struct DemoError: Error, CustomStringConvertible {
    let description: String
    init(_ description: String) { self.description = description }
}

/// A TCP port that was free a moment ago on 127.0.0.1.
func freeLocalPort() throws -> Int {
    let (fd, port) = try Socket.listen(host: "127.0.0.1", port: 0)
    close(fd)
    return port
}
