import CHeraldShims
import Glibc

/// Thin wrappers over the socket system calls Herald uses, each deciding once what errno means.
public enum Socket {
    /// Resolves `host` and starts a non-blocking TCP connect; the descriptor becomes writable when
    /// the connection is established or failed (`pendingError` tells which).
    ///
    /// Resolution is synchronous (getaddrinfo): connections are opened rarely (they live for hours)
    /// and behind a reconnect backoff, so a short stall of the loop there is accepted.
    public static func startConnect(host: String, port: Int) throws(SystemError) -> Int32 {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        var result: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let first = result else {
            throw SystemError(operation: "resolving \(host): \(String(cString: gai_strerror(status)))", errno: 0)
        }
        defer { freeaddrinfo(result) }
        var lastError = SystemError(operation: "connecting to \(host):\(port)", errno: ECONNREFUSED)
        var candidate: UnsafeMutablePointer<addrinfo>? = first
        while let info = candidate {
            candidate = info.pointee.ai_next
            let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
            if fd < 0 { lastError = SystemError(operation: "socket", errno: errno); continue }
            setNoDelay(fd)
            if connect(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) == 0 || errno == EINPROGRESS {
                return fd
            }
            lastError = SystemError(operation: "connecting to \(host):\(port)", errno: errno)
            close(fd)
        }
        throw lastError
    }

    /// The result of a non-blocking connect, read once the descriptor is writable.
    public static func pendingError(_ fd: Int32) -> Int32 {
        var value: Int32 = 0
        var length = socklen_t(MemoryLayout<Int32>.size)
        if getsockopt(fd, SOL_SOCKET, SO_ERROR, &value, &length) != 0 { return errno }
        return value
    }

    static func setNoDelay(_ fd: Int32) {
        var one: Int32 = 1
        _ = setsockopt(fd, Int32(IPPROTO_TCP), TCP_NODELAY, &one, socklen_t(MemoryLayout<Int32>.size))
    }

    /// A non-blocking listening socket on `host:port` (port 0 picks a free one).
    public static func listen(host: String, port: Int, backlog: Int32 = 1024) throws(SystemError) -> (fd: Int32, port: Int) {
        var hints = addrinfo()
        hints.ai_family = AF_UNSPEC
        hints.ai_socktype = Int32(SOCK_STREAM.rawValue)
        hints.ai_flags = AI_PASSIVE
        var result: UnsafeMutablePointer<addrinfo>? = nil
        let status = getaddrinfo(host, String(port), &hints, &result)
        guard status == 0, let info = result else {
            throw SystemError(operation: "resolving \(host): \(String(cString: gai_strerror(status)))", errno: 0)
        }
        defer { freeaddrinfo(result) }
        let fd = socket(info.pointee.ai_family, Int32(SOCK_STREAM.rawValue) | Int32(SOCK_NONBLOCK.rawValue) | Int32(SOCK_CLOEXEC.rawValue), 0)
        if fd < 0 { throw SystemError(operation: "socket", errno: errno) }
        var one: Int32 = 1
        _ = setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, socklen_t(MemoryLayout<Int32>.size))
        if bind(fd, info.pointee.ai_addr, info.pointee.ai_addrlen) != 0 {
            let code = errno
            close(fd)
            throw SystemError(operation: "binding \(host):\(port)", errno: code)
        }
        if Glibc.listen(fd, backlog) != 0 {
            let code = errno
            close(fd)
            throw SystemError(operation: "listening on \(host):\(port)", errno: code)
        }
        return (fd, localPort(fd))
    }

    static func localPort(_ fd: Int32) -> Int {
        var storage = sockaddr_storage()
        var length = socklen_t(MemoryLayout<sockaddr_storage>.size)
        _ = withUnsafeMutablePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr.self, capacity: 1) { getsockname(fd, $0, &length) }
        }
        if Int32(storage.ss_family) == AF_INET6 {
            return withUnsafePointer(to: &storage) {
                $0.withMemoryRebound(to: sockaddr_in6.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin6_port)) }
            }
        }
        return withUnsafePointer(to: &storage) {
            $0.withMemoryRebound(to: sockaddr_in.self, capacity: 1) { Int(UInt16(bigEndian: $0.pointee.sin_port)) }
        }
    }
}
