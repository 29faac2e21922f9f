/// Where Redis is and how to log in: parsed from `redis://[user[:password]@]host[:port][/db]`,
/// or `rediss://…` for TLS (`tls`: whom to trust, which client certificate to present).
///
/// The user and password may be percent-encoded (`redis://app:p%40ss@redis`); an unencoded `@`,
/// `/` or `:` in the password also works, because the credentials end at the last `@`. Every
/// error names the part that is wrong and never repeats the credentials; `description` shows the
/// password as `***`. Operators are told to keep the password out of the URL altogether (the
/// command line is readable by every local user): the CLI reads it from a file or the environment
/// and sets `password`.
public struct RedisEndpoint: Sendable, Equatable, CustomStringConvertible {
    public var host: String
    public var port: Int
    public var user: String?
    public var password: String?
    public var database: Int
    /// TLS settings; nil for plain TCP. A connection made from this endpoint speaks TLS when set.
    public var tls: RedisTLS?

    /// Longer URLs are refused before anything is parsed (a URL is a few dozen bytes).
    public static let maximumURLLength = 4096
    /// The longest DNS name.
    static let maximumHostLength = 253

    public init(host: String = "127.0.0.1", port: Int = 6379, user: String? = nil, password: String? = nil, database: Int = 0,
                tls: RedisTLS? = nil) {
        self.host = host
        self.port = port
        self.user = user
        self.password = password
        self.database = database
        self.tls = tls
    }

    public init(url: String) throws(RedisError) {
        let length = url.utf8.count
        guard length <= RedisEndpoint.maximumURLLength else {
            throw .invalidURL("the Redis URL is \(length) bytes long; at most \(RedisEndpoint.maximumURLLength) are accepted")
        }
        let secure = url.hasPrefix("rediss://")
        guard secure || url.hasPrefix("redis://") else {
            throw .invalidURL("the Redis URL must look like redis://[user[:password]@]host[:port][/db] (rediss:// for TLS), got \(RedisEndpoint.redact(url))")
        }
        var rest = Substring(url.dropFirst(secure ? "rediss://".count : "redis://".count))
        var user: String? = nil
        var password: String? = nil
        // The credentials end at the last `@`: host, port and database never hold one.
        if let at = rest.lastIndex(of: "@") {
            let credentials = rest[..<at]
            rest = rest[rest.index(after: at)...]
            if let colon = credentials.firstIndex(of: ":") {
                user = try RedisEndpoint.percentDecoded(credentials[..<colon], part: "user")
                password = try RedisEndpoint.percentDecoded(credentials[credentials.index(after: colon)...], part: "password")
            } else {
                // As redis-cli reads it: `redis://secret@host` is a password, not a user.
                password = try RedisEndpoint.percentDecoded(credentials, part: "password")
            }
            if user?.isEmpty == true { user = nil }
            if password?.isEmpty == true { password = nil }
        }
        var database = 0
        if let slash = rest.firstIndex(of: "/") {
            let path = rest[rest.index(after: slash)...]
            rest = rest[..<slash]
            if !path.isEmpty {
                guard path.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }), let value = Int(path), value <= Int(Int32.max) else {
                    throw .invalidURL("the database in the Redis URL must be a number from 0 to \(Int32.max), got \(RedisEndpoint.quoted(path))")
                }
                database = value
            }
        }
        var host: Substring
        var portText: Substring? = nil
        if rest.hasPrefix("[") {
            guard let close = rest.firstIndex(of: "]") else {
                throw .invalidURL("the IPv6 address in the Redis URL has no closing ], got \(RedisEndpoint.quoted(rest))")
            }
            host = rest[rest.index(after: rest.startIndex)..<close]
            let after = rest[rest.index(after: close)...]
            if after.hasPrefix(":") {
                portText = after.dropFirst()
            } else if !after.isEmpty {
                throw .invalidURL("unexpected text after the IPv6 address in the Redis URL: \(RedisEndpoint.quoted(after))")
            }
        } else {
            let colons = rest.reduce(0) { $0 + ($1 == ":" ? 1 : 0) }
            if colons > 1 {
                throw .invalidURL("an IPv6 address in the Redis URL goes in brackets (redis://[::1]:6379), got \(RedisEndpoint.quoted(rest))")
            }
            if let colon = rest.firstIndex(of: ":") {
                host = rest[..<colon]
                portText = rest[rest.index(after: colon)...]
            } else {
                host = rest
            }
        }
        var port = 6379
        if let portText {
            guard !portText.isEmpty, portText.utf8.count <= 5, portText.utf8.allSatisfy({ $0 >= 0x30 && $0 <= 0x39 }),
                  let value = Int(portText), (1...65535).contains(value) else {
                throw .invalidURL("the port in the Redis URL must be 1 to 65535, got \(RedisEndpoint.quoted(portText))")
            }
            port = value
        }
        try RedisEndpoint.checkHost(host)
        self.init(host: String(host), port: port, user: user, password: password, database: database,
                  tls: secure ? RedisTLS() : nil)
    }

    /// The same Redis login and TLS settings at another address: what a resolver (Sentinel's
    /// master, a cluster node, a MOVED answer) connects to, so credentials, database and TLS
    /// follow without being copied field by field. With TLS the new host is what the server's
    /// certificate must name (or, for an IP address, list as an address).
    public func at(host: String, port: Int) -> RedisEndpoint {
        var copy = self
        copy.host = host
        copy.port = port
        return copy
    }

    /// Why `host` cannot be connected to, or nil: empty, too long, or holding characters no host
    /// name or address has (spaces, control characters, NUL).
    public static func problem(withHost host: some StringProtocol) -> String? {
        if host.isEmpty { return "the Redis host is empty (e.g. redis://127.0.0.1:6379)" }
        if host.utf8.count > maximumHostLength { return "the Redis host is longer than \(maximumHostLength) bytes" }
        let allowed = host.utf8.allSatisfy { byte in
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return true
            case UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: ":"), UInt8(ascii: "%"):
                return true  // `:` and `%` for IPv6 addresses and their zone
            default:
                return false
            }
        }
        if !allowed { return "the Redis host may hold only letters, digits, '-', '.', '_' (or an IPv6 address in brackets), got \(quoted(host))" }
        return nil
    }

    private static func checkHost(_ host: Substring) throws(RedisError) {
        if let problem = problem(withHost: host) { throw .invalidURL(problem) }
    }

    /// The URL with its password hidden (`***`), for logs and messages.
    public var description: String { url(passwordPlaceholder: "***") }

    /// The URL without any password, for a child process whose password travels apart (in its
    /// environment): user percent-encoded, IPv6 hosts in brackets.
    public var urlWithoutPassword: String { url(passwordPlaceholder: nil) }

    private func url(passwordPlaceholder: String?) -> String {
        var credentials = ""
        if password != nil, let passwordPlaceholder {
            credentials = (user.map(RedisEndpoint.percentEncoded) ?? "") + ":" + passwordPlaceholder + "@"
        } else if let user {
            // `user:@`, since a lone `name@` reads as a password (as redis-cli reads it).
            credentials = RedisEndpoint.percentEncoded(user) + ":@"
        }
        let hostText = host.contains(":") ? "[\(host)]" : host
        return "\(tls == nil ? "redis" : "rediss")://\(credentials)\(hostText):\(port)/\(database)"
    }

    /// `url` with anything before its last `@` hidden, shortened: for messages about a URL that did not parse.
    static func redact(_ url: String) -> String {
        var shown = Substring(url)
        if let at = url.lastIndex(of: "@") {
            // Only a scheme before the credentials is kept (`pw@host` has none to show).
            var scheme = ""
            if let separator = url.firstRange(of: "://"), separator.lowerBound < at { scheme = String(url[..<separator.upperBound]) }
            shown = Substring(scheme + "***" + url[at...])
        }
        return quoted(shown)
    }

    /// `text` in quotes, cut to 64 characters, control characters escaped: parts of an operator's
    /// URL echoed back in an error.
    static func quoted(_ text: some StringProtocol) -> String {
        var result = "'"
        var count = 0
        for scalar in text.unicodeScalars {
            if count == 64 { result += "…"; break }
            count += 1
            if scalar.value < 0x20 || scalar.value == 0x7F {
                result += "\\u{\(String(scalar.value, radix: 16))}"
            } else {
                result.unicodeScalars.append(scalar)
            }
        }
        return result + "'"
    }

    /// Decodes `%XX` escapes; the error names the part (user or password), never its text.
    static func percentDecoded(_ text: Substring, part: String) throws(RedisError) -> String {
        guard text.utf8.contains(UInt8(ascii: "%")) else { return String(text) }
        var bytes: [UInt8] = []
        bytes.reserveCapacity(text.utf8.count)
        var iterator = text.utf8.makeIterator()
        while let byte = iterator.next() {
            guard byte == UInt8(ascii: "%") else { bytes.append(byte); continue }
            guard let high = iterator.next().flatMap(hexValue), let low = iterator.next().flatMap(hexValue) else {
                throw .invalidURL("the \(part) in the Redis URL has a '%' not followed by two hex digits")
            }
            bytes.append(high << 4 | low)
        }
        guard let decoded = String(validating: bytes, as: UTF8.self) else {
            throw .invalidURL("the \(part) in the Redis URL is not UTF-8 once percent-decoded")
        }
        return decoded
    }

    private static func hexValue(_ byte: UInt8) -> UInt8? {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"): return byte - UInt8(ascii: "0")
        case UInt8(ascii: "a")...UInt8(ascii: "f"): return byte - UInt8(ascii: "a") + 10
        case UInt8(ascii: "A")...UInt8(ascii: "F"): return byte - UInt8(ascii: "A") + 10
        default: return nil
        }
    }

    /// Percent-encodes everything but RFC 3986's unreserved characters.
    static func percentEncoded(_ text: String) -> String {
        let digits = Array("0123456789ABCDEF".utf8)
        var bytes: [UInt8] = []
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "a")...UInt8(ascii: "z"), UInt8(ascii: "A")...UInt8(ascii: "Z"), UInt8(ascii: "0")...UInt8(ascii: "9"),
                 UInt8(ascii: "-"), UInt8(ascii: "."), UInt8(ascii: "_"), UInt8(ascii: "~"):
                bytes.append(byte)
            default:
                bytes.append(UInt8(ascii: "%"))
                bytes.append(digits[Int(byte >> 4)])
                bytes.append(digits[Int(byte & 0x0F)])
            }
        }
        return String(decoding: bytes, as: UTF8.self)
    }
}
