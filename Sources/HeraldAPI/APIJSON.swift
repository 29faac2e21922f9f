/// A JSON value for response bodies, rendered compactly with members in the order given. No
/// Foundation: the 202 of a 1,000-job batch is written without a Codable round trip.
indirect enum APIJSON: Sendable {
    case string(String)
    case integer(Int64)
    case bool(Bool)
    case null
    case array([APIJSON])
    case object([(String, APIJSON)])

    static func int(_ value: Int) -> APIJSON { .integer(Int64(value)) }
    static func optional(_ value: Int64?) -> APIJSON { value.map { .integer($0) } ?? .null }
    static func optional(_ value: Int?) -> APIJSON { value.map { .integer(Int64($0)) } ?? .null }
    static func optional(_ value: String?) -> APIJSON { value.map { .string($0) } ?? .null }

    /// The text, compact, with a trailing newline (for people reading it with curl).
    func bytes() -> [UInt8] {
        var out: [UInt8] = []
        out.reserveCapacity(256)
        write(to: &out)
        out.append(0x0A)
        return out
    }

    func write(to out: inout [UInt8]) {
        switch self {
        case .string(let text): APIJSON.quote(text, into: &out)
        case .integer(let value): out.append(contentsOf: String(value).utf8)
        case .bool(let value): out.append(contentsOf: (value ? "true" : "false").utf8)
        case .null: out.append(contentsOf: "null".utf8)
        case .array(let items):
            out.append(UInt8(ascii: "["))
            for (index, item) in items.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                item.write(to: &out)
            }
            out.append(UInt8(ascii: "]"))
        case .object(let members):
            out.append(UInt8(ascii: "{"))
            for (index, member) in members.enumerated() {
                if index > 0 { out.append(UInt8(ascii: ",")) }
                APIJSON.quote(member.0, into: &out)
                out.append(UInt8(ascii: ":"))
                member.1.write(to: &out)
            }
            out.append(UInt8(ascii: "}"))
        }
    }

    /// `text` as a JSON string: quotes, backslashes and control characters escaped.
    static func quote(_ text: String, into out: inout [UInt8]) {
        out.append(UInt8(ascii: "\""))
        for byte in text.utf8 {
            switch byte {
            case UInt8(ascii: "\""): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\"")])
            case UInt8(ascii: "\\"): out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "\\")])
            case 0x0A: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "n")])
            case 0x0D: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "r")])
            case 0x09: out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "t")])
            case 0..<0x20, 0x7F:
                let hex: [UInt8] = Array("0123456789abcdef".utf8)
                out.append(contentsOf: [UInt8(ascii: "\\"), UInt8(ascii: "u"), UInt8(ascii: "0"), UInt8(ascii: "0"),
                                        hex[Int(byte >> 4)], hex[Int(byte & 0x0F)]])
            default: out.append(byte)
            }
        }
        out.append(UInt8(ascii: "\""))
    }
}
