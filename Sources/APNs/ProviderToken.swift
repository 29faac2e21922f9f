/// The claims of an APNs provider token (a JWT signed with ES256): which key signed it, which team it
/// speaks for, and when it was issued.
///
/// Built by the worker's token signer (Transport's `ProviderTokenSigner`), which signs `signingInput()`
/// and calls `token(signature:)`. The team and key ids are validated once here, so every later token is
/// well formed; they need no JSON escaping because they are ASCII letters and digits.
public struct ProviderTokenClaims: Sendable, Equatable {
    /// The 10-character Team ID from Apple's developer account (the JWT's `iss`).
    public let teamID: String
    /// The 10-character Key ID of the `.p8` signing key (the JWT header's `kid`).
    public let keyID: String
    /// Seconds since 1970 (the JWT's `iat`, encoded as a JSON number).
    public let issuedAt: Int64

    /// Validates the ids: each must be exactly 10 ASCII letters or digits, as Apple issues them.
    public init(teamID: String, keyID: String, issuedAt: Int64) throws(ProviderTokenError) {
        guard ProviderTokenClaims.isAppleIdentifier(teamID) else { throw .invalidTeamID(teamID) }
        guard ProviderTokenClaims.isAppleIdentifier(keyID) else { throw .invalidKeyID(keyID) }
        self.teamID = teamID
        self.keyID = keyID
        self.issuedAt = issuedAt
    }

    /// The same team and key, issued at another time (no revalidation needed).
    public func issued(at issuedAt: Int64) -> ProviderTokenClaims {
        ProviderTokenClaims(validatedTeamID: teamID, keyID: keyID, issuedAt: issuedAt)
    }

    /// `base64url(header) "." base64url(claims)`: the bytes ES256 signs.
    ///
    /// Header `{"alg":"ES256","kid":"<keyID>"}`, claims `{"iss":"<teamID>","iat":<issuedAt>}`. APNs
    /// requires `iat` to be a JSON number; a quoted `iat` is rejected.
    public func signingInput() -> [UInt8] {
        let header = #"{"alg":"ES256","kid":""# + keyID + #""}"#
        let claims = #"{"iss":""# + teamID + #"","iat":"# + String(issuedAt) + "}"
        var input: [UInt8] = []
        input.reserveCapacity(
            Base64URL.encodedLength(byteCount: header.utf8.count) + 1
                + Base64URL.encodedLength(byteCount: claims.utf8.count))
        input.append(contentsOf: Base64URL.encode(header.utf8).utf8)
        input.append(UInt8(ascii: "."))
        input.append(contentsOf: Base64URL.encode(claims.utf8).utf8)
        return input
    }

    /// The complete JWT: `signingInput() "." base64url(signature)`.
    ///
    /// - Parameter signature: the JOSE ES256 signature, 64 bytes of raw `r||s` (not DER).
    public func token(signature: [UInt8]) -> String {
        precondition(signature.count == 64, "an ES256 JOSE signature is 64 bytes of raw r||s, got \(signature.count)")
        return String(decoding: signingInput(), as: UTF8.self) + "." + Base64URL.encode(signature)
    }

    /// True if `text` is exactly 10 ASCII letters or digits, the shape of Apple's Team IDs and Key IDs.
    public static func isAppleIdentifier(_ text: String) -> Bool {
        var count = 0
        for byte in text.utf8 {
            guard isASCIIAlphanumeric(byte) else { return false }
            count += 1
        }
        return count == 10
    }

    private static func isASCIIAlphanumeric(_ byte: UInt8) -> Bool {
        switch byte {
        case UInt8(ascii: "0")...UInt8(ascii: "9"), UInt8(ascii: "A")...UInt8(ascii: "Z"),
            UInt8(ascii: "a")...UInt8(ascii: "z"):
            return true
        default:
            return false
        }
    }

    private init(validatedTeamID teamID: String, keyID: String, issuedAt: Int64) {
        self.teamID = teamID
        self.keyID = keyID
        self.issuedAt = issuedAt
    }
}

/// The part of a provider token an error is about.
public enum ProviderTokenSegment: String, Sendable, Equatable, CustomStringConvertible {
    case header
    case claims
    case signature

    public var description: String { rawValue }
}

/// Why provider-token claims could not be built or a provider token could not be parsed.
///
/// Descriptions are written for the developer reading a log: they say what was wrong and what APNs
/// expects. They quote ids and JSON fields but never signatures or keys.
public enum ProviderTokenError: Error, Sendable, Equatable, CustomStringConvertible {
    /// A team id that is not exactly 10 ASCII letters or digits.
    case invalidTeamID(String)
    /// A key id that is not exactly 10 ASCII letters or digits.
    case invalidKeyID(String)
    /// The token is empty (or only whitespace).
    case empty
    /// The token does not have three dot-separated segments (header, claims, signature).
    case wrongSegmentCount(Int)
    /// A segment is not unpadded base64url.
    case invalidBase64URL(ProviderTokenSegment)
    /// The header or claims segment is not a flat JSON object.
    case invalidJSON(ProviderTokenSegment, reason: String)
    /// A required field is absent.
    case missingField(ProviderTokenSegment, name: String)
    /// A field appears twice, which makes the token ambiguous.
    case duplicateField(ProviderTokenSegment, name: String)
    /// A field has the wrong JSON type (for example `"iat":"1700000000"`).
    case wrongFieldType(ProviderTokenSegment, name: String, expected: String, found: String)
    /// The header's `alg` is not `ES256`.
    case unsupportedAlgorithm(String)
    /// The signature is not 64 bytes (raw `r||s`).
    case wrongSignatureLength(Int)

    public var description: String {
        switch self {
        case .invalidTeamID(let id):
            return "team id \(quoted(id)) must be exactly 10 ASCII letters or digits (the Team ID in Apple's developer account)"
        case .invalidKeyID(let id):
            return "key id \(quoted(id)) must be exactly 10 ASCII letters or digits (the Key ID of the .p8 signing key)"
        case .empty:
            return "the provider token is empty"
        case .wrongSegmentCount(let count):
            return "a provider token has 3 dot-separated segments (header.claims.signature), this one has \(count)"
        case .invalidBase64URL(let segment):
            return "the \(segment) segment is not unpadded base64url (RFC 7515: A-Z a-z 0-9 - _, no '=')"
        case .invalidJSON(let segment, let reason):
            return "the \(segment) segment is not a flat JSON object: \(reason)"
        case .missingField(let segment, let name):
            return "the \(segment) has no \(quoted(name)) field"
        case .duplicateField(let segment, let name):
            return "the \(segment) has the field \(quoted(name)) more than once"
        case .wrongFieldType(let segment, let name, let expected, let found):
            return "the \(segment) field \(quoted(name)) must be \(expected), found \(found)"
        case .unsupportedAlgorithm(let alg):
            return "the header's alg is \(quoted(alg)); APNs provider tokens use \"ES256\""
        case .wrongSignatureLength(let count):
            let hint = count > 64 && count <= 72 ? " (this looks like a DER-encoded ECDSA signature)" : ""
            return "the signature is \(count) bytes; an ES256 JOSE signature is 64 bytes of raw r||s\(hint)"
        }
    }
}

/// Quotes text for an error message, shortened so that a garbage input cannot flood a log line.
private func quoted(_ text: String) -> String {
    let limit = 40
    var shown = ""
    var count = 0
    for character in text.unicodeScalars {
        if count == limit {
            shown += "…"
            break
        }
        shown.unicodeScalars.append(contentsOf: character.escaped(asASCII: true).unicodeScalars)
        count += 1
    }
    return "\"" + shown + "\""
}

/// A provider token taken apart, as the APNs emulator receives it: the header and claims fields it needs,
/// the exact bytes that were signed, and the raw signature. Parsing checks the shape only; the
/// signature and the ids are checked by Transport's `ProviderTokenVerifier`.
public struct ParsedProviderToken: Sendable, Equatable {
    /// The header's `alg` (always `ES256` once parsed).
    public let alg: String
    /// The header's `kid`: the key id.
    public let kid: String
    /// The claims' `iss`: the team id.
    public let iss: String
    /// The claims' `iat`: seconds since 1970.
    public let iat: Int64
    /// The first two segments and the dot between them, as received.
    public let signingInput: [UInt8]
    /// The decoded third segment: 64 bytes of raw `r||s`.
    public let signature: [UInt8]

    /// Parses `header.claims.signature`. Leading and trailing whitespace is ignored, as is whitespace
    /// inside the JSON; other fields (such as `typ`) are allowed.
    public static func parse(_ jwt: String) throws(ProviderTokenError) -> ParsedProviderToken {
        var bytes = Array(jwt.utf8)[...]
        while let first = bytes.first, isJSONWhitespace(first) { bytes.removeFirst() }
        while let last = bytes.last, isJSONWhitespace(last) { bytes.removeLast() }
        guard !bytes.isEmpty else { throw .empty }

        let segments = bytes.split(separator: UInt8(ascii: "."), omittingEmptySubsequences: false)
        guard segments.count == 3 else { throw .wrongSegmentCount(segments.count) }

        guard let headerJSON = Base64URL.decode(bytes: segments[0]) else { throw .invalidBase64URL(.header) }
        guard let claimsJSON = Base64URL.decode(bytes: segments[1]) else { throw .invalidBase64URL(.claims) }
        guard let signature = Base64URL.decode(bytes: segments[2]) else { throw .invalidBase64URL(.signature) }

        let header = try FlatJSONObject(parsing: headerJSON, segment: .header)
        let alg = try header.string("alg")
        guard alg == "ES256" else { throw .unsupportedAlgorithm(alg) }
        let kid = try header.string("kid")

        let claims = try FlatJSONObject(parsing: claimsJSON, segment: .claims)
        let iss = try claims.string("iss")
        let iat = try claims.integer("iat")

        guard signature.count == 64 else { throw .wrongSignatureLength(signature.count) }

        return ParsedProviderToken(
            alg: alg, kid: kid, iss: iss, iat: iat,
            signingInput: Array(bytes[segments[0].startIndex..<segments[1].endIndex]),
            signature: signature)
    }
}

private func isJSONWhitespace(_ byte: UInt8) -> Bool {
    byte == 0x20 || byte == 0x09 || byte == 0x0A || byte == 0x0D
}

/// A minimal reader for the two small, flat JSON objects in a provider token: string, number, boolean
/// and null values; nested objects and arrays are refused. Private on purpose: the module's general
/// JSON scanner serves everything else.
private struct FlatJSONObject {
    enum Value {
        case string(String)
        case integer(Int64)
        /// A number with a fraction or exponent, or one outside Int64.
        case otherNumber(String)
        case bool
        case null

        var kind: String {
            switch self {
            case .string(let text): "a string (\(quoted(text)))"
            case .integer(let value): "an integer (\(value))"
            case .otherNumber(let text): "a non-integer number (\(text))"
            case .bool: "a boolean"
            case .null: "null"
            }
        }
    }

    let segment: ProviderTokenSegment
    private(set) var fields: [(name: String, value: Value)] = []

    init(parsing json: [UInt8], segment: ProviderTokenSegment) throws(ProviderTokenError) {
        self.segment = segment
        var reader = Reader(bytes: json, segment: segment)
        reader.skipWhitespace()
        try reader.expect(UInt8(ascii: "{"), "it does not start with '{'")
        reader.skipWhitespace()
        if reader.peek() == UInt8(ascii: "}") {
            reader.index += 1
        } else {
            while true {
                reader.skipWhitespace()
                guard reader.peek() == UInt8(ascii: "\"") else { throw reader.failure("expected a quoted field name") }
                let name = try reader.readString()
                if fields.contains(where: { $0.name == name }) { throw .duplicateField(segment, name: name) }
                reader.skipWhitespace()
                try reader.expect(UInt8(ascii: ":"), "expected ':' after field name")
                reader.skipWhitespace()
                fields.append((name, try reader.readValue()))
                reader.skipWhitespace()
                if reader.peek() == UInt8(ascii: ",") {
                    reader.index += 1
                    continue
                }
                try reader.expect(UInt8(ascii: "}"), "expected ',' or '}' after a value")
                break
            }
        }
        reader.skipWhitespace()
        guard reader.index == json.count else { throw reader.failure("unexpected bytes after the object") }
    }

    func value(_ name: String) throws(ProviderTokenError) -> Value {
        guard let field = fields.first(where: { $0.name == name }) else { throw .missingField(segment, name: name) }
        return field.value
    }

    func string(_ name: String) throws(ProviderTokenError) -> String {
        let value = try value(name)
        guard case .string(let text) = value else {
            throw .wrongFieldType(segment, name: name, expected: "a JSON string", found: value.kind)
        }
        return text
    }

    func integer(_ name: String) throws(ProviderTokenError) -> Int64 {
        let value = try value(name)
        guard case .integer(let number) = value else {
            throw .wrongFieldType(
                segment, name: name, expected: "an integer JSON number (seconds since 1970, unquoted)", found: value.kind)
        }
        return number
    }

    private struct Reader {
        let bytes: [UInt8]
        let segment: ProviderTokenSegment
        var index = 0

        func peek() -> UInt8? { index < bytes.count ? bytes[index] : nil }

        func failure(_ reason: String) -> ProviderTokenError {
            .invalidJSON(segment, reason: "\(reason) at byte \(index)")
        }

        mutating func skipWhitespace() {
            while index < bytes.count, isJSONWhitespace(bytes[index]) { index += 1 }
        }

        mutating func expect(_ byte: UInt8, _ reason: String) throws(ProviderTokenError) {
            guard peek() == byte else { throw failure(reason) }
            index += 1
        }

        mutating func readValue() throws(ProviderTokenError) -> Value {
            // 0 (end of input) falls through to "expected a value".
            switch peek() ?? 0 {
            case UInt8(ascii: "\""):
                return .string(try readString())
            case UInt8(ascii: "-"), UInt8(ascii: "0")...UInt8(ascii: "9"):
                return try readNumber()
            case UInt8(ascii: "t"):
                try readLiteral("true")
                return .bool
            case UInt8(ascii: "f"):
                try readLiteral("false")
                return .bool
            case UInt8(ascii: "n"):
                try readLiteral("null")
                return .null
            case UInt8(ascii: "{"), UInt8(ascii: "["):
                throw failure("nested objects and arrays do not belong in a provider token")
            default:
                throw failure("expected a value")
            }
        }

        mutating func readLiteral(_ literal: StaticString) throws(ProviderTokenError) {
            let expected = UnsafeBufferPointer(start: literal.utf8Start, count: literal.utf8CodeUnitCount)
            guard bytes.count - index >= expected.count,
                bytes[index..<index + expected.count].elementsEqual(expected)
            else { throw failure("invalid literal") }
            index += expected.count
        }

        /// JSON number grammar: `-? (0 | [1-9][0-9]*) (. [0-9]+)? ([eE] [+-]? [0-9]+)?`.
        mutating func readNumber() throws(ProviderTokenError) -> Value {
            let start = index
            var isInteger = true
            if peek() == UInt8(ascii: "-") { index += 1 }
            if peek() == UInt8(ascii: "0") {
                index += 1
            } else {
                guard try skipDigits() > 0 else { throw failure("invalid number") }
            }
            if peek() == UInt8(ascii: ".") {
                isInteger = false
                index += 1
                guard try skipDigits() > 0 else { throw failure("invalid number") }
            }
            if peek() == UInt8(ascii: "e") || peek() == UInt8(ascii: "E") {
                isInteger = false
                index += 1
                if peek() == UInt8(ascii: "+") || peek() == UInt8(ascii: "-") { index += 1 }
                guard try skipDigits() > 0 else { throw failure("invalid number") }
            }
            let text = String(decoding: bytes[start..<index], as: UTF8.self)
            if isInteger, let value = Int64(text) { return .integer(value) }
            return .otherNumber(text)
        }

        private mutating func skipDigits() throws(ProviderTokenError) -> Int {
            let start = index
            while let byte = peek(), byte >= UInt8(ascii: "0"), byte <= UInt8(ascii: "9") { index += 1 }
            return index - start
        }

        mutating func readString() throws(ProviderTokenError) -> String {
            index += 1  // the opening quote
            var utf8: [UInt8] = []
            while true {
                guard let byte = peek() else { throw failure("unterminated string") }
                index += 1
                switch byte {
                case UInt8(ascii: "\""):
                    let text = String(decoding: utf8, as: UTF8.self)
                    // String(decoding:) repairs invalid UTF-8; a repaired string would not round-trip.
                    guard text.utf8.elementsEqual(utf8) else { throw failure("invalid UTF-8 in a string") }
                    return text
                case UInt8(ascii: "\\"):
                    try readEscape(into: &utf8)
                case 0x00..<0x20:
                    throw failure("unescaped control character in a string")
                default:
                    utf8.append(byte)
                }
            }
        }

        private mutating func readEscape(into utf8: inout [UInt8]) throws(ProviderTokenError) {
            guard let byte = peek() else { throw failure("unterminated escape") }
            index += 1
            switch byte {
            case UInt8(ascii: "\""), UInt8(ascii: "\\"), UInt8(ascii: "/"): utf8.append(byte)
            case UInt8(ascii: "b"): utf8.append(0x08)
            case UInt8(ascii: "f"): utf8.append(0x0C)
            case UInt8(ascii: "n"): utf8.append(0x0A)
            case UInt8(ascii: "r"): utf8.append(0x0D)
            case UInt8(ascii: "t"): utf8.append(0x09)
            case UInt8(ascii: "u"):
                var scalar = UInt32(try readHex4())
                if (0xD800..<0xDC00).contains(scalar) {
                    guard peek() == UInt8(ascii: "\\") else { throw failure("unpaired surrogate") }
                    index += 1
                    guard peek() == UInt8(ascii: "u") else { throw failure("unpaired surrogate") }
                    index += 1
                    let low = UInt32(try readHex4())
                    guard (0xDC00..<0xE000).contains(low) else { throw failure("unpaired surrogate") }
                    scalar = 0x10000 + ((scalar - 0xD800) << 10) + (low - 0xDC00)
                }
                guard let unicodeScalar = Unicode.Scalar(scalar) else { throw failure("unpaired surrogate") }
                utf8.append(contentsOf: UTF8.encode(unicodeScalar)!)
            default:
                throw failure("invalid escape")
            }
        }

        private mutating func readHex4() throws(ProviderTokenError) -> UInt16 {
            guard bytes.count - index >= 4 else { throw failure("truncated \\u escape") }
            var value: UInt16 = 0
            for _ in 0..<4 {
                let byte = bytes[index]
                let digit: UInt8
                switch byte {
                case UInt8(ascii: "0")...UInt8(ascii: "9"): digit = byte - UInt8(ascii: "0")
                case UInt8(ascii: "a")...UInt8(ascii: "f"): digit = byte - UInt8(ascii: "a") + 10
                case UInt8(ascii: "A")...UInt8(ascii: "F"): digit = byte - UInt8(ascii: "A") + 10
                default: throw failure("invalid \\u escape")
                }
                value = value << 4 | UInt16(digit)
                index += 1
            }
            return value
        }
    }
}
