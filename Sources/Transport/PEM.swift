#if canImport(Glibc)
import Glibc
#elseif canImport(Musl)
import Musl
#elseif canImport(Darwin)
import Darwin
#endif
import COpenSSL

/// A PEM file (a key or a certificate) that could not be read or written.
public struct PEMFileError: Error, CustomStringConvertible, Sendable, Equatable {
    public enum Operation: String, Sendable {
        case reading
        case writing
    }

    public let path: String
    public let operation: Operation
    public let errno: Int32

    public var description: String {
        "\(operation.rawValue) \(path) failed: \(String(cString: strerror(errno))) (errno \(errno))"
    }
}

/// Whole-file reads and writes for small text files (keys, certificates, configuration, stats),
/// with POSIX calls so Herald needs no Foundation for them. Keys are written owner-only.
public enum PEMFile {
    /// Files larger than this are not PEM keys or certificates Herald reads.
    static let maximumSize = 1 << 20

    public static func read(path: String) throws(PEMFileError) -> String {
        let fd = open(path, O_RDONLY | O_CLOEXEC)
        guard fd >= 0 else { throw PEMFileError(path: path, operation: .reading, errno: errno) }
        defer { close(fd) }
        var contents: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 16 * 1024)
        while true {
            let count = chunk.withUnsafeMutableBytes { systemRead(fd, $0.baseAddress, $0.count) }
            if count < 0 {
                if errno == EINTR { continue }
                throw PEMFileError(path: path, operation: .reading, errno: errno)
            }
            if count == 0 { break }
            contents.append(contentsOf: chunk[..<count])
            if contents.count > maximumSize { throw PEMFileError(path: path, operation: .reading, errno: EFBIG) }
        }
        return String(decoding: contents, as: UTF8.self)
    }

    /// Replaces `path` with `text`, setting `mode` before any byte is written (so a key is never
    /// readable by others, even briefly or when the file already existed with a wider mode).
    public static func write(_ text: String, to path: String, mode: mode_t) throws(PEMFileError) {
        let fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, mode)
        guard fd >= 0 else { throw PEMFileError(path: path, operation: .writing, errno: errno) }
        defer { close(fd) }
        guard fchmod(fd, mode) == 0 else { throw PEMFileError(path: path, operation: .writing, errno: errno) }
        let bytes = Array(text.utf8)
        var written = 0
        while written < bytes.count {
            let count = bytes.withUnsafeBytes { systemWrite(fd, $0.baseAddress! + written, $0.count - written) }
            if count < 0 {
                if errno == EINTR { continue }
                throw PEMFileError(path: path, operation: .writing, errno: errno)
            }
            written += count
        }
    }
}

// `PEMFile.read` and `write` shadow the system calls inside the enum.
private func systemRead(_ fd: Int32, _ buffer: UnsafeMutableRawPointer?, _ count: Int) -> Int { read(fd, buffer, count) }
private func systemWrite(_ fd: Int32, _ buffer: UnsafeRawPointer?, _ count: Int) -> Int { write(fd, buffer, count) }

/// OpenSSL memory BIOs for PEM text: reading from a Swift string without copying, and collecting what a
/// `PEM_write_bio_*` call writes into a Swift string.
enum MemoryBIO {
    /// Calls `body` with a read-only BIO over `text`'s UTF-8 bytes, valid only during the call.
    static func withReading<Value, Failure: Error>(
        _ text: String, _ body: (OpaquePointer) throws(Failure) -> Value
    ) throws(Failure) -> Value {
        var text = text
        // withUTF8 rethrows untyped errors, so the typed error travels out in a Swift.Result.
        let outcome = text.withUTF8 { bytes -> Result<Value, Failure> in
            guard let bio = BIO_new_mem_buf(bytes.baseAddress, Int32(clamping: bytes.count)) else {
                fatalError("OpenSSL could not allocate a memory BIO (out of memory)")
            }
            defer { BIO_free(bio) }
            do throws(Failure) {
                return .success(try body(bio))
            } catch {
                return .failure(error)
            }
        }
        return try outcome.get()
    }

    /// Runs `write` on a fresh memory BIO and returns what it wrote. `write` returns OpenSSL's status
    /// (1 for success).
    static func string(operation: String, _ write: (OpaquePointer) -> Int32) throws(OpenSSLError) -> String {
        guard let bio = BIO_new(BIO_s_mem()) else {
            fatalError("OpenSSL could not allocate a memory BIO (out of memory)")
        }
        defer { BIO_free(bio) }
        OpenSSLError.clearQueue()
        guard write(bio) == 1 else { throw OpenSSLError(operation: operation) }
        let pending = Int(BIO_ctrl_pending(bio))
        var bytes = [UInt8](repeating: 0, count: pending)
        let read = bytes.withUnsafeMutableBytes { BIO_read(bio, $0.baseAddress, Int32(clamping: $0.count)) }
        guard read == pending else { throw OpenSSLError(operation: operation) }
        return String(decoding: bytes, as: UTF8.self)
    }
}
