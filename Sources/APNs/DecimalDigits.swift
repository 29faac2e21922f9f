/// The decimal digits of an unsigned integer without a String or a division by a variable:
/// digits come out least significant first into a stack buffer (dividing by the constant 10
/// compiles to a multiply), then `body` sees them most significant first. Used where ids are
/// written per notification (Redis commands, derived apns-ids).
public enum DecimalDigits {
    @inline(__always)
    public static func with<R>(_ value: UInt64, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        var digits: (UInt64, UInt64, UInt64) = (0, 0, 0)  // 24 bytes: room for 20 digits
        return withUnsafeMutableBytes(of: &digits) { buffer in
            var rest = value
            var start = buffer.count
            repeat {
                start -= 1
                buffer[start] = UInt8(truncatingIfNeeded: rest % 10) + 0x30
                rest /= 10
            } while rest > 0
            return body(UnsafeRawBufferPointer(rebasing: buffer[start...]))
        }
    }
}
