import Glibc

/// Accepts TCP connections on one port and hands each to `accepted` (on the loop).
public final class HTTP2Listener: IOHandler {
    public let loop: EventLoop
    public let port: Int
    private let fd: Int32
    private let accepted: (Int32) -> Void

    public init(loop: EventLoop, host: String, port: Int, accepted: @escaping (Int32) -> Void) throws(SystemError) {
        self.loop = loop
        let (fd, boundPort) = try Socket.listen(host: host, port: port)
        self.fd = fd
        self.port = boundPort
        self.accepted = accepted
        try loop.register(fd, handler: self, interest: .read)
    }

    public func readable() {
        while let client = Socket.accept(fd) { accepted(client) }
    }

    public func writable() {}

    public func close() {
        loop.deregister(fd)
        Glibc.close(fd)
    }
}
