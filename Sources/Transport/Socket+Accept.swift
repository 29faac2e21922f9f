import CHeraldShims
import Glibc

extension Socket {
    /// What one `accept` on a listening socket gave.
    public enum AcceptOutcome: Equatable, Sendable {
        /// A new non-blocking, close-on-exec connection.
        case accepted(Int32)
        /// Nobody is waiting (EAGAIN), or the peer gave up before it was accepted.
        case noneWaiting
        /// The process or the system has no descriptor (or buffer) left: EMFILE, ENFILE, ENOBUFS,
        /// ENOMEM. The connection stays queued; accepting again at once would fail the same way.
        case outOfDescriptors(errno: Int32)
        /// Any other error.
        case failed(errno: Int32)
    }

    /// Accepts one pending connection and says exactly why when it could not, so that a listener
    /// can back off on descriptor exhaustion instead of being woken again at once (epoll keeps
    /// reporting the listener readable while the connection waits).
    public static func acceptConnection(_ listener: Int32) -> AcceptOutcome {
        while true {
            let fd = herald_accept4(listener)
            if fd >= 0 {
                setNoDelay(fd)
                return .accepted(fd)
            }
            let code = errno
            switch code {
            case EINTR: continue
            case EAGAIN, EWOULDBLOCK, ECONNABORTED, EPROTO: return .noneWaiting
            case EMFILE, ENFILE, ENOBUFS, ENOMEM: return .outOfDescriptors(errno: code)
            default: return .failed(errno: code)
            }
        }
    }
}
