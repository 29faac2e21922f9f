/// Reads the JSON body APNs sends with an error response (`{"reason":"…","timestamp":…}`) or
/// with a GOAWAY frame (`{"reason":"Shutdown"}`).
///
/// The transport calls it when a stream or connection ends badly; `ResponseClassifier` calls it
/// for `classify(status:body:)`. A body that is not a JSON object, or whose members have the
/// wrong types, yields `nil`s rather than an error: the status alone still decides the outcome.
public enum APNsErrorBody {
    /// The `reason` and `timestamp` (ms since the epoch; sent with 410) of an error body.
    public static func parse(_ body: UnsafeRawBufferPointer) -> (reason: APNsReason?, timestamp: Int64?) {
        let json = JSONScanner(body)
        guard let root = try? json.validate(), root.kind == .object else { return (nil, nil) }
        var reasonValue: JSONScanner.Value?
        var timestampValue: JSONScanner.Value?
        try? json.forEachMember(of: root) { name, value in
            if json.textEquals(name, "reason") {
                reasonValue = value
            } else if json.textEquals(name, "timestamp") {
                timestampValue = value
            }
        }
        return (reasonValue.flatMap { reason($0, in: json) }, timestampValue.flatMap { timestamp($0, in: json) })
    }

    /// The `reason` and `timestamp` of an error body held in an array.
    public static func parse(_ body: [UInt8]) -> (reason: APNsReason?, timestamp: Int64?) {
        body.withUnsafeBytes { parse($0) }
    }

    /// A documented reason comes back as the shared constant, so a flood of identical errors
    /// allocates no strings. An undocumented one is kept when it looks like an APNs word (a
    /// reason Apple adds later) and is `APNsReason.unknown` otherwise: huge, binary or escaped
    /// text never leaves the parser.
    private static func reason(_ value: JSONScanner.Value, in json: JSONScanner) -> APNsReason? {
        guard value.kind == .string else { return nil }
        for known in APNsReason.all where json.stringEquals(value, known.rawValue) {
            return known
        }
        // Escapes take at most 6 bytes a character: anything longer cannot be a plausible word.
        guard value.range.count <= APNsReason.maxUndocumentedLength * 6 + 2, let text = json.string(value) else {
            return .unknown
        }
        return APNsReason.isPlausibleWord(text.utf8) ? APNsReason(rawValue: text) : .unknown
    }

    /// APNs sends an integer; a number with a fraction or exponent is accepted when it is within
    /// Int64's range, and truncated.
    private static func timestamp(_ value: JSONScanner.Value, in json: JSONScanner) -> Int64? {
        if let integer = json.int64(value) { return integer }
        guard let double = json.double(value), double.isFinite,
            double >= -9.223_372_036_854_775_808e18, double < 9.223_372_036_854_775_808e18
        else { return nil }
        return Int64(double)
    }
}
