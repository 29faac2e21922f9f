import CHeraldShims
import Glibc

/// Delivers SIGTERM, SIGINT (and others) to a loop as ordinary events, through a signalfd.
///
/// Create it before starting any other thread: it blocks the signals for the process so that
/// only the signalfd sees them.
public final class SignalWatcher: IOHandler {
    private let loop: EventLoop
    private let fd: Int32
    private let handler: (Int32) -> Void

    public init(loop: EventLoop, signals: [Int32] = [SIGTERM, SIGINT], handler: @escaping (Int32) -> Void) throws(SystemError) {
        var set = sigset_t()
        sigemptyset(&set)
        for signal in signals { sigaddset(&set, signal) }
        if pthread_sigmask(SIG_BLOCK, &set, nil) != 0 { throw SystemError(operation: "pthread_sigmask", errno: errno) }
        let fd = signalfd(-1, &set, Int32(SFD_NONBLOCK | SFD_CLOEXEC))
        if fd < 0 { throw SystemError(operation: "signalfd", errno: errno) }
        self.loop = loop
        self.fd = fd
        self.handler = handler
        try loop.register(fd, handler: self, interest: .read)
    }

    public func readable() {
        var info = signalfd_siginfo()
        while withUnsafeMutableBytes(of: &info, { read(fd, $0.baseAddress, $0.count) }) == MemoryLayout<signalfd_siginfo>.size {
            handler(Int32(info.ssi_signo))
        }
    }

    public func writable() {}

    deinit {
        loop.deregister(fd)
        close(fd)
    }
}
