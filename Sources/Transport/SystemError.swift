import Glibc

/// A failed system call, with the errno it left and what Herald was doing.
public struct SystemError: Error, CustomStringConvertible, Sendable, Equatable {
    public let operation: String
    public let errno: Int32

    public init(operation: String, errno: Int32) {
        self.operation = operation
        self.errno = errno
    }

    public var description: String {
        // errno 0: the operation's own words say it all (e.g. a name that does not resolve).
        if errno == 0 { return operation }
        return "\(operation) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}
