import Glibc

/// Accepts TCP connections on one port and hands each to `accepted` (on the loop).
///
/// Out of descriptors (EMFILE, ENFILE), it stops watching the port for a while (100 ms, doubling
/// to 1 s) instead of being woken again at once for the connection still queued: a listener that
/// spins takes the whole core from the connections it already has.
public final class HTTP2Listener: IOHandler {
    public let loop: EventLoop
    public let port: Int
    private let fd: Int32
    private let accepted: (Int32) -> Void
    private var pause: Int64 = 0
    private var resumeTimer: EventLoop.TimerID?
    private var closed = false

    public init(loop: EventLoop, host: String, port: Int, accepted: @escaping (Int32) -> Void) throws(SystemError) {
        self.loop = loop
        let (fd, boundPort) = try Socket.listen(host: host, port: port)
        self.fd = fd
        self.port = boundPort
        self.accepted = accepted
        try loop.register(fd, handler: self, interest: .read)
    }

    public func readable() {
        while !closed {
            switch Socket.acceptConnection(fd) {
            case .accepted(let client):
                pause = 0
                accepted(client)
            case .noneWaiting, .failed:
                return
            case .outOfDescriptors:
                pauseAccepting()
                return
            }
        }
    }

    private func pauseAccepting() {
        guard resumeTimer == nil else { return }
        pause = pause == 0 ? 100 : min(pause * 2, 1_000)
        loop.deregister(fd)
        resumeTimer = loop.schedule(afterMilliseconds: pause) { [weak self] in
            guard let self, !self.closed else { return }
            self.resumeTimer = nil
            do { try self.loop.register(self.fd, handler: self, interest: .read) } catch { self.pauseAccepting() }
        }
    }

    public func writable() {}

    public func close() {
        guard !closed else { return }
        closed = true
        if let resumeTimer { loop.cancel(resumeTimer) } else { loop.deregister(fd) }
        Glibc.close(fd)
    }
}
