/// Arithmetic that stops at the type's bounds instead of trapping, for sums and products on
/// numbers a producer or a server wrote (expirations, timestamps, stream ids): the worker must
/// never crash on one, and a clamped value always lands on the safe side of the comparison it
/// feeds (a retry is due "never", an expiration is "far away").
extension FixedWidthInteger {
    /// `self + other`, or the nearest bound when that overflows.
    @inlinable
    public func addingSaturating(_ other: Self) -> Self {
        let (sum, overflow) = addingReportingOverflow(other)
        guard overflow else { return sum }
        return other < 0 ? .min : .max
    }

    /// `self - other`, or the nearest bound when that overflows.
    @inlinable
    public func subtractingSaturating(_ other: Self) -> Self {
        let (difference, overflow) = subtractingReportingOverflow(other)
        guard overflow else { return difference }
        return other < 0 ? .max : .min
    }

    /// `self * other`, or the nearest bound when that overflows.
    @inlinable
    public func multipliedSaturating(by other: Self) -> Self {
        let (product, overflow) = multipliedReportingOverflow(by: other)
        guard overflow else { return product }
        return (self < 0) == (other < 0) ? .max : .min
    }
}
