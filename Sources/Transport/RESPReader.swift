import COpenSSL
import Glibc

/// Reads Redis replies (RESP2) from a byte stream onto a `RedisReplyTape`, with bounded memory
/// whatever a producer wrote into Redis.
///
/// hiredis' reader holds a whole bulk string, then the whole reply, before anyone sees it: forty
/// 10 MB jobs in one XREADGROUP reply cost over a gigabyte. This reader works on the bytes as they
/// arrive. A bulk string longer than `maxBulkBytes` keeps only its first `keptPrefixBytes` on the
/// tape (defaults: 3 MiB and 4 KiB), with its full length and its SHA-256 computed on the way (`RedisReplyTape.Truncation`);
/// once a reply holds `maxReplyBytes`, later strings keep no bytes and are marked the same way;
/// an array's elements past `maxArrayElements` are read and dropped, and the array is marked. So
/// a reply costs at most about `maxReplyBytes` plus the read buffer, and the caller learns exactly
/// what was cut. Protocol errors (a malformed header, a negative length other than -1, a line
/// longer than 64 KiB) are thrown; the connection is then closed. Loop-confined.
public final class RESPReader {
    public struct Limits: Sendable {
        /// Bulk strings up to this size are kept whole.
        public var maxBulkBytes: Int
        /// What a longer bulk string keeps.
        public var keptPrefixBytes: Int
        /// Bytes of strings one reply may keep in all.
        public var maxReplyBytes: Int
        /// Elements kept of one array.
        public var maxArrayElements: Int

        /// 3 MiB per value holds the largest valid job field (10,000 device tokens of 200 digits).
        public init(maxBulkBytes: Int = 3 << 20, keptPrefixBytes: Int = 4 * 1024, maxReplyBytes: Int = 32 << 20,
                    maxArrayElements: Int = 1 << 17) {
            self.maxBulkBytes = maxBulkBytes
            self.keptPrefixBytes = min(keptPrefixBytes, maxBulkBytes)
            self.maxReplyBytes = maxReplyBytes
            self.maxArrayElements = maxArrayElements
        }
    }

    public struct ProtocolError: Error, CustomStringConvertible, Sendable {
        public let description: String
    }

    public let tape: RedisReplyTape
    public let limits: Limits
    /// A header line split across two reads.
    private var line: [UInt8] = []
    /// One open array: elements still to come, how many of them are kept, and whether the next
    /// one is dropped (read, not stored).
    struct Frame {
        var remaining: Int
        var keep: Int
        var dropping: Bool
    }
    /// The open arrays, innermost last: a fixed block, so counting an element costs no array
    /// bookkeeping (this runs for every element of every reply).
    private let stack: UnsafeMutablePointer<Frame>
    private var depth = 0
    /// Arrays nested deeper than this are a protocol error (Redis' replies nest a few levels).
    static let maxDepth = 64
    // The bulk string in progress (one that did not arrive whole in one read, or is being cut).
    private var bulkRemaining = -1
    private var bulkTerminator = 0
    private var bulkNode = -1
    private var bulkKeep = 0
    private var bulkLength = 0
    private var bulkDropped = false
    private var bulkOverBudget = false
    private var hasher: OpaquePointer?
    static let maxLineBytes = 64 * 1024

    public init(tape: RedisReplyTape, limits: Limits = Limits()) {
        self.tape = tape
        self.limits = limits
        stack = .allocate(capacity: RESPReader.maxDepth)
    }

    deinit {
        stack.deallocate()
        if let hasher { EVP_MD_CTX_free(hasher) }
    }

    /// Consumes `input` from `offset` until one whole reply is on the tape (true: the caller hands
    /// it out and resets the tape before calling again) or the input runs out (false).
    public func read(_ input: UnsafeRawBufferPointer, from offset: inout Int) throws(ProtocolError) -> Bool {
        guard let base = input.baseAddress else { return false }
        let count = input.count
        while offset < count {
            if bulkRemaining >= 0 {
                let take = min(bulkRemaining, count - offset)
                let kept = min(take, bulkKeep)
                if kept > 0 {
                    tape.appendBytes(UnsafeRawBufferPointer(start: base + offset, count: kept))
                    bulkKeep -= kept
                }
                if let hasher, take > 0 { _ = EVP_DigestUpdate(hasher, base + offset, take) }
                offset += take
                bulkRemaining -= take
                if bulkRemaining == 0 {
                    bulkRemaining = -1
                    bulkTerminator = 2
                    finishBulk()
                }
                continue
            }
            if bulkTerminator > 0 {
                let skip = min(bulkTerminator, count - offset)
                offset += skip
                bulkTerminator -= skip
                if bulkTerminator == 0, valueCompleted() { return true }
                continue
            }
            // The usual bulk string, header and bytes all in this read: taken without the
            // general header path (nine of an entry's eleven values are bulk strings).
            if line.isEmpty, base.load(fromByteOffset: offset, as: UInt8.self) == UInt8(ascii: "$"),
               let next = wholeBulk(base, count: count, at: offset) {
                offset = next
                if valueCompleted() { return true }
                continue
            }
            // A header line: type byte, text, CRLF.
            guard let found = memchr(base + offset, 0x0A, count - offset) else {
                guard line.count + count - offset <= RESPReader.maxLineBytes else { throw ProtocolError(description: "a reply header longer than 64 KiB") }
                line.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: count - offset))
                offset = count
                return false
            }
            let lineEnd = UnsafeRawPointer(found) - base
            let complete: Bool
            if line.isEmpty {
                let text = UnsafeRawBufferPointer(start: base + offset, count: lineEnd - offset)
                offset = lineEnd + 1
                complete = try header(text, input: input, offset: &offset)
            } else {
                guard line.count + (lineEnd - offset) <= RESPReader.maxLineBytes else { throw ProtocolError(description: "a reply header longer than 64 KiB") }
                line.append(contentsOf: UnsafeRawBufferPointer(start: base + offset, count: lineEnd - offset))
                let joined = line
                line.removeAll(keepingCapacity: true)
                offset = lineEnd + 1
                var at = offset
                let outcome: Result<Bool, ProtocolError> = joined.withUnsafeBytes { bytes in
                    do throws(ProtocolError) { return .success(try header(bytes, input: input, offset: &at)) } catch { return .failure(error) }
                }
                offset = at
                complete = try outcome.get()
            }
            if complete { return true }
        }
        return false
    }

    /// The bulk string whose header starts at `offset` (`$`, 1 to 9 digits, CRLF), when all of it
    /// is in the input, is kept whole by the limits and is not being dropped: appended to the tape,
    /// and the offset past its CRLF returned. Anything else (a split, a null, a long or dropped
    /// string, a malformed header) returns nil for `header` to handle or refuse.
    @inline(__always)
    private func wholeBulk(_ base: UnsafeRawPointer, count: Int, at offset: Int) -> Int? {
        if depth > 0 && stack[depth - 1].dropping { return nil }
        var index = offset + 1
        var length = 0
        let digitsEnd = min(count, offset + 11)  // at most 10 looked at: 10 digits fall back
        while index < digitsEnd {
            let digit = base.load(fromByteOffset: index, as: UInt8.self) &- UInt8(ascii: "0")
            if digit >= 10 { break }
            length = length &* 10 &+ Int(digit)
            index += 1
        }
        let digits = index - offset - 1
        guard digits > 0, digits <= 9, count - index >= 2,
              base.load(fromByteOffset: index, as: UInt8.self) == 0x0D,
              base.load(fromByteOffset: index + 1, as: UInt8.self) == 0x0A else { return nil }
        let start = index + 2
        guard length <= limits.maxBulkBytes, length <= limits.maxReplyBytes - tape.byteCount,
              count - start >= length + 2 else { return nil }
        tape.appendString(.string, UnsafeRawBufferPointer(start: base + start, count: length))
        return start + length + 2
    }

    /// Forgets a partial reply (after the connection failed).
    public func reset() {
        line.removeAll()
        depth = 0
        bulkRemaining = -1
        bulkTerminator = 0
        bulkNode = -1
        if let hasher { EVP_MD_CTX_free(hasher); self.hasher = nil }
        tape.reset()
    }

    /// Handles one header line (without its LF; `offset` is just past it); true when it completed
    /// the reply. A bulk string that is all in `input` is taken here at once.
    private func header(_ raw: UnsafeRawBufferPointer, input: UnsafeRawBufferPointer, offset: inout Int) throws(ProtocolError) -> Bool {
        var text = raw
        if let last = text.last, last == 0x0D { text = UnsafeRawBufferPointer(rebasing: text[text.startIndex..<text.endIndex - 1]) }
        guard let type = text.first else { throw ProtocolError(description: "an empty reply header") }
        let body = UnsafeRawBufferPointer(rebasing: text[(text.startIndex + 1)...])
        let dropping = depth > 0 && stack[depth - 1].dropping
        switch type {
        case UInt8(ascii: "$"):
            let length = try RESPReader.integer(body)
            if length == -1 {
                if !dropping { tape.appendNode(.null, value: 0) }
                return valueCompleted()
            }
            guard length >= 0, length <= Int64(Int32.max) else { throw ProtocolError(description: "a bulk string of length \(length)") }
            let bulk = Int(length)
            let available = input.count - offset
            if dropping {
                if available >= bulk + 2 {
                    offset += bulk + 2
                    return valueCompleted()
                }
                bulkNode = -1
                bulkKeep = 0
                bulkDropped = true
                bulkLength = bulk
                bulkRemaining = bulk
                return false
            }
            let room = limits.maxReplyBytes - tape.byteCount
            if bulk <= limits.maxBulkBytes, bulk <= room, available >= bulk + 2 {
                // The usual string: whole, within the limits, all in this read.
                tape.appendString(.string, UnsafeRawBufferPointer(start: input.baseAddress! + offset, count: bulk))
                offset += bulk + 2
                return valueCompleted()
            }
            bulkLength = bulk
            bulkDropped = false
            bulkKeep = bulk <= limits.maxBulkBytes ? bulk : limits.keptPrefixBytes
            if bulkKeep > max(0, room) {
                bulkKeep = 0
                bulkOverBudget = true
            } else {
                bulkOverBudget = false
            }
            bulkNode = tape.beginString(.string)
            if bulkKeep < bulkLength {
                // Cut: hash the whole string on the way so the caller can say what it was.
                if hasher == nil { hasher = EVP_MD_CTX_new() }
                if let hasher { _ = EVP_DigestInit_ex(hasher, EVP_sha256(), nil) }
            }
            bulkRemaining = bulkLength
            if bulkLength == 0 {
                bulkRemaining = -1
                bulkTerminator = 2
                finishBulk()
            }
            return false
        case UInt8(ascii: "*"):
            let elements = try RESPReader.integer(body)
            if elements == -1 {
                if !dropping { tape.appendNode(.null, value: 0) }
                return valueCompleted()
            }
            guard elements >= 0, elements <= Int64(Int32.max) else { throw ProtocolError(description: "an array of \(elements) elements") }
            let total = Int(elements)
            if total == 0 {
                if !dropping { tape.appendNode(.array, value: 0) }
                return valueCompleted()
            }
            guard depth < RESPReader.maxDepth else { throw ProtocolError(description: "arrays nested deeper than \(RESPReader.maxDepth)") }
            if dropping {
                stack[depth] = Frame(remaining: total, keep: 0, dropping: true)
            } else {
                let kept = min(total, limits.maxArrayElements)
                let node = tape.appendNode(.array, value: Int64(kept))
                if kept < total { tape.markTruncated(node, fullLength: total, sha256: []) }
                stack[depth] = Frame(remaining: total, keep: kept, dropping: kept == 0)
            }
            depth += 1
            return false
        case UInt8(ascii: "+"), UInt8(ascii: "-"):
            if !dropping {
                let kind: RedisReplyTape.Node.Kind = type == UInt8(ascii: "+") ? .status : .error
                let kept = max(0, min(body.count, limits.maxReplyBytes - tape.byteCount))
                tape.appendString(kind, UnsafeRawBufferPointer(rebasing: body[body.startIndex..<body.startIndex + kept]))
            }
            return valueCompleted()
        case UInt8(ascii: ":"):
            let value = try RESPReader.integer(body)
            if !dropping { tape.appendNode(.integer, value: value) }
            return valueCompleted()
        default:
            throw ProtocolError(description: "a reply that starts with byte \(type)")
        }
    }

    private func finishBulk() {
        guard !bulkDropped, bulkNode >= 0 else {
            bulkDropped = false
            return
        }
        tape.endString(bulkNode)
        if let hasher, bulkLength > Int(tape.nodes[bulkNode].length) {
            var digest = [UInt8](repeating: 0, count: 32)
            var size: UInt32 = 32
            _ = EVP_DigestFinal_ex(hasher, &digest, &size)
            tape.markTruncated(bulkNode, fullLength: bulkLength, sha256: digest, byBudget: bulkOverBudget && bulkLength <= limits.maxBulkBytes)
        }
        bulkNode = -1
    }

    /// One value ended: counts it against the open arrays; true when the whole reply ended.
    @inline(__always)
    private func valueCompleted() -> Bool {
        while depth > 0 {
            let top = stack + (depth - 1)
            top.pointee.remaining -= 1
            if top.pointee.remaining == 0 {
                depth -= 1
                continue
            }
            if !top.pointee.dropping {
                // Past the elements this array keeps: the rest are read and dropped.
                top.pointee.keep -= 1
                if top.pointee.keep == 0 { top.pointee.dropping = true }
            }
            return false
        }
        return true
    }

    /// A decimal integer (optionally negative), checked: no overflow, no stray bytes.
    static func integer(_ digits: UnsafeRawBufferPointer) throws(ProtocolError) -> Int64 {
        var index = digits.startIndex
        var negative = false
        if index < digits.endIndex, digits[index] == UInt8(ascii: "-") {
            negative = true
            index += 1
        }
        guard index < digits.endIndex, digits.endIndex - index <= 19 else { throw ProtocolError(description: "a malformed integer in a reply") }
        var value: Int64 = 0
        while index < digits.endIndex {
            let digit = digits[index] &- UInt8(ascii: "0")
            guard digit < 10 else { throw ProtocolError(description: "a malformed integer in a reply") }
            let (times, overflow1) = value.multipliedReportingOverflow(by: 10)
            let (sum, overflow2) = times.addingReportingOverflow(Int64(digit))
            guard !overflow1, !overflow2 else { throw ProtocolError(description: "an integer out of range in a reply") }
            value = sum
            index += 1
        }
        return negative ? -value : value
    }
}
