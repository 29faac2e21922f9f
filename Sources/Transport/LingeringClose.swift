import Glibc

/// Closes a socket whose peer may still be sending, without losing what was sent to it.
///
/// `close()` on a socket with unread input makes the kernel answer with RST and throw away the
/// socket's unsent output: a server that finished its last response and closed while the client
/// was still writing (new requests it had not yet learned were refused, WINDOW_UPDATEs) would
/// lose responses the client never got, and the client would send them again as duplicates.
/// Instead, the write side is shut (FIN after the queued bytes), input is read and discarded
/// until the peer closes too or `timeoutMilliseconds` pass, and only then is the descriptor
/// closed. The loop keeps this object alive while the descriptor is registered.
final class LingeringClose: IOHandler {
    private let loop: EventLoop
    private let fd: Int32
    private var timer: EventLoop.TimerID?
    /// True once the descriptor was closed. Loop thread only.
    private(set) var finished = false
    private static let scratchSize = 16 * 1024

    /// Takes over `fd` (already deregistered by its previous owner) and closes it when done.
    @discardableResult
    static func start(loop: EventLoop, fd: Int32, timeoutMilliseconds: Int64 = 2_000) -> LingeringClose {
        LingeringClose(loop: loop, fd: fd, timeoutMilliseconds: timeoutMilliseconds)
    }

    private init(loop: EventLoop, fd: Int32, timeoutMilliseconds: Int64) {
        self.loop = loop
        self.fd = fd
        guard Glibc.shutdown(fd, Int32(SHUT_WR)) == 0 else {
            finish()
            return
        }
        do {
            try loop.register(fd, handler: self, interest: .read)
        } catch {
            finish()
            return
        }
        timer = loop.schedule(afterMilliseconds: timeoutMilliseconds) { [weak self] in
            self?.timer = nil
            self?.finish()
        }
    }

    func readable() {
        var scratch = (UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0), UInt64(0))
        while !finished {
            let count = withUnsafeMutableBytes(of: &scratch) { read(fd, $0.baseAddress, $0.count) }
            if count > 0 { continue }
            if count < 0 && (errno == EAGAIN || errno == EWOULDBLOCK) { return }
            if count < 0 && errno == EINTR { continue }
            finish()  // EOF: the peer closed its side too (or an error ended the connection)
        }
    }

    func writable() {}

    private func finish() {
        guard !finished else { return }
        finished = true
        if let timer { loop.cancel(timer) }
        timer = nil
        loop.deregister(fd)
        close(fd)
    }
}
