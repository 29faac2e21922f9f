import Glibc
import Synchronization
import Transport

/// The bearer tokens the API accepts, read from a file (one per line; blank lines and lines
/// starting with `#` ignored) and read again when the file changes or on SIGHUP.
///
/// Only SHA-256 digests of the tokens are kept, and a presented token is compared with every
/// one of them in constant time (all bytes of all digests, no early exit), so neither the
/// answer's timing nor a memory dump gives a token away. Tokens never reach a log line: a
/// reload says how many tokens it read, nothing more.
public final class BearerTokens: Sendable {
    public let path: String
    private let digests: Mutex<[[UInt8]]>
    /// What the file looked like at the last read (device, inode, size, mtime): a change means reload.
    private let signature = Mutex<[Int64]>([])

    /// The shortest token accepted: shorter ones can be guessed.
    public static let minimumLength = 16

    /// Why a token file cannot be used.
    public struct FileError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    /// Reads `path` now; throws when it cannot be read or holds no usable token.
    public init(path: String) throws(FileError) {
        self.path = path
        let (tokens, signature) = try BearerTokens.read(path)
        digests = Mutex(tokens.map(BearerTokens.digest))
        self.signature.withLock { $0 = signature }
    }

    /// How many tokens are in force.
    public var count: Int { digests.withLock { $0.count } }

    /// Whether `token` is one of the file's.
    public func accepts(_ token: some StringProtocol) -> Bool {
        let presented = BearerTokens.digest(String(token))
        let known = digests.withLock { $0 }
        var match: UInt8 = 1
        for candidate in known {
            var difference: UInt8 = 0
            for index in 0..<32 { difference |= candidate[index] ^ presented[index] }
            // match becomes 0 when some candidate had no difference; no branch on the bytes.
            match &= UInt8(truncatingIfNeeded: (Int(difference) - 1) >> 8) ^ 1
        }
        return match == 0
    }

    /// Reads the file again if it changed since the last read (or always, with `force`).
    /// Returns nil when nothing changed, else the number of tokens now in force, or throws
    /// (keeping the old tokens) when the new file is unusable.
    @discardableResult
    public func reload(force: Bool = false) throws(FileError) -> Int? {
        if !force, let now = BearerTokens.fileSignature(path), now == signature.withLock({ $0 }) { return nil }
        let (tokens, newSignature) = try BearerTokens.read(path)
        let fresh = tokens.map(BearerTokens.digest)
        digests.withLock { $0 = fresh }
        signature.withLock { $0 = newSignature }
        return fresh.count
    }

    static func digest(_ token: String) -> [UInt8] {
        let hasher = SHA256Digest()
        hasher.update(token)
        // 64 hex digits → 32 bytes.
        let hex = Array(hasher.finishHex().utf8)
        var bytes = [UInt8](repeating: 0, count: 32)
        for index in 0..<32 { bytes[index] = nibble(hex[2 * index]) << 4 | nibble(hex[2 * index + 1]) }
        return bytes
    }

    private static func nibble(_ digit: UInt8) -> UInt8 { digit <= UInt8(ascii: "9") ? digit - UInt8(ascii: "0") : digit - UInt8(ascii: "a") + 10 }

    static func fileSignature(_ path: String) -> [Int64]? {
        var info = stat()
        guard stat(path, &info) == 0 else { return nil }
        return [Int64(info.st_dev), Int64(info.st_ino), Int64(info.st_size), Int64(info.st_mtim.tv_sec), Int64(info.st_mtim.tv_nsec)]
    }

    /// The tokens of the file, and its signature as read.
    static func read(_ path: String) throws(FileError) -> ([String], [Int64]) {
        guard let signature = fileSignature(path) else {
            throw FileError(description: "cannot read the API token file \(path): \(String(cString: strerror(errno))). "
                + "Give a readable file with one bearer token per line (--tokens-file or HERALD_API_TOKENS_FILE).")
        }
        guard let file = fopen(path, "r") else {
            throw FileError(description: "cannot open the API token file \(path): \(String(cString: strerror(errno))).")
        }
        defer { fclose(file) }
        var bytes: [UInt8] = []
        var chunk = [UInt8](repeating: 0, count: 4096)
        while true {
            let n = fread(&chunk, 1, chunk.count, file)
            if n <= 0 { break }
            bytes.append(contentsOf: chunk[0..<n])
            // A token file is a few lines; a huge one is a mistake, not a token list.
            if bytes.count > 1 << 20 { throw FileError(description: "the API token file \(path) is over 1 MiB; it should hold one token per line.") }
        }
        var tokens: [String] = []
        for (number, line) in bytes.split(separator: UInt8(ascii: "\n"), omittingEmptySubsequences: false).enumerated() {
            let text = String(decoding: line, as: UTF8.self).trimmingWhitespace()
            if text.isEmpty || text.hasPrefix("#") { continue }
            guard text.utf8.count >= minimumLength else {
                throw FileError(description: "line \(number + 1) of the API token file \(path) holds a token shorter than \(minimumLength) characters; "
                    + "use long random tokens (e.g. `openssl rand -hex 32`).")
            }
            guard text.utf8.allSatisfy({ $0 > 0x20 && $0 < 0x7F }) else {
                throw FileError(description: "line \(number + 1) of the API token file \(path) holds a token with spaces or non-ASCII characters; "
                    + "a bearer token is printable ASCII without spaces.")
            }
            tokens.append(text)
        }
        guard !tokens.isEmpty else {
            throw FileError(description: "the API token file \(path) holds no token; put one bearer token per line (e.g. from `openssl rand -hex 32`).")
        }
        return (tokens, signature)
    }
}

extension String {
    func trimmingWhitespace() -> String {
        var rest = Substring(self)
        while let first = rest.first, first == " " || first == "\t" || first == "\r" { rest = rest.dropFirst() }
        while let last = rest.last, last == " " || last == "\t" || last == "\r" { rest = rest.dropLast() }
        return String(rest)
    }
}
