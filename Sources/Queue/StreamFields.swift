import Glibc
import Transport

/// A stream entry's field names and values, packed into one buffer: one allocation per entry
/// however many fields it has, where a list of `(String, [UInt8])` pairs costs one for the list
/// and one for each value. The worker reads every job through this; the values it keeps (the
/// payload) are slices of the same buffer, not copies.
///
/// Layout of `storage`: `2 × count + 1` boundaries as native `UInt32`s (offsets into the bytes
/// that follow: name 0 starts at boundary 0, its value at boundary 1, name 1 at boundary 2 …,
/// the last value ends at boundary 2 × count), then the names and values back to back, byte for
/// byte as Redis returned them. Names compare as bytes: a producer may write any bytes as a field
/// name, and only the exact bytes of a name Herald knows match it (see `FieldName`).
public struct StreamFields: Sendable {
    @usableFromInline let storage: [UInt8]
    /// Fields (name and value pairs).
    public let count: Int

    public static let empty = StreamFields(storage: [], count: 0)

    @usableFromInline init(storage: [UInt8], count: Int) {
        self.storage = storage
        self.count = count
    }

    public var isEmpty: Bool { count == 0 }

    /// Where the storage's header lies, for a prefetch hint (`Transport.storageHeader(of:)`).
    var storageHeader: UnsafeRawPointer? { Transport.storageHeader(of: storage) }

    /// Packs `pairs` (names as `FieldName` spells them: escaped names become their bytes again).
    public init(_ pairs: [(name: String, value: [UInt8])]) {
        let names = pairs.map { FieldName.bytes($0.name) }
        let total = zip(names, pairs).reduce(0) { $0 + $1.0.count + $1.1.value.count }
        self = StreamFields.build(count: pairs.count, byteCount: total) { boundaries, bytes in
            var offset = 0
            for (index, pair) in pairs.enumerated() {
                boundaries[2 * index] = UInt32(offset)
                names[index].withUnsafeBytes { bytes.baseAddress!.advanced(by: offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
                offset += names[index].count
                boundaries[2 * index + 1] = UInt32(offset)
                pair.value.withUnsafeBytes { bytes.baseAddress!.advanced(by: offset).copyMemory(from: $0.baseAddress!, byteCount: $0.count) }
                offset += pair.value.count
            }
            boundaries[2 * pairs.count] = UInt32(offset)
        }
    }

    /// Builds a packed list in one allocation: `fill` writes the `2 × count + 1` boundaries and
    /// the `byteCount` bytes of names and values.
    static func build(count: Int, byteCount: Int,
                      _ fill: (Boundaries, UnsafeMutableRawBufferPointer) -> Void) -> StreamFields {
        if count == 0 { return .empty }
        let header = 4 * (2 * count + 1)
        let storage = [UInt8](unsafeUninitializedCapacity: header + byteCount) { buffer, initialized in
            let raw = UnsafeMutableRawBufferPointer(buffer)
            fill(Boundaries(base: raw.baseAddress!), UnsafeMutableRawBufferPointer(rebasing: raw[header...]))
            initialized = header + byteCount
        }
        return StreamFields(storage: storage, count: count)
    }

    /// Writes boundaries into the header being built (the buffer of a `[UInt8]` is 16-byte
    /// aligned, so each `UInt32` lands aligned).
    struct Boundaries {
        let base: UnsafeMutableRawPointer
        subscript(index: Int) -> UInt32 {
            get { base.loadUnaligned(fromByteOffset: 4 * index, as: UInt32.self) }
            nonmutating set { base.storeBytes(of: newValue, toByteOffset: 4 * index, as: UInt32.self) }
        }
    }

    @inline(__always) private var header: Int { 4 * (2 * count + 1) }

    @inline(__always) private func boundary(_ index: Int) -> Int {
        Int(storage.withUnsafeBytes { $0.loadUnaligned(fromByteOffset: 4 * index, as: UInt32.self) })
    }

    /// Where the name of field `index` lies in `storage`.
    @inline(__always) private func nameRange(_ index: Int) -> Range<Int> {
        header + boundary(2 * index)..<header + boundary(2 * index + 1)
    }

    /// Where the value of field `index` lies in `storage` (see `slice` and `withBytes`).
    @inline(__always) func valueRange(_ index: Int) -> Range<Int> {
        header + boundary(2 * index + 1)..<header + boundary(2 * index + 2)
    }

    /// The value of field `index`: a slice of the packed buffer (no copy).
    public func value(at index: Int) -> ArraySlice<UInt8> {
        slice(valueRange(index))
    }

    /// The bytes at `range` (a `valueRange`) as a slice of the packed buffer, which it retains.
    @inline(__always) func slice(_ range: Range<Int>) -> ArraySlice<UInt8> {
        storage[range]
    }

    /// The bytes at `range` (a `valueRange` or a name's), valid during `body`: read in place, with no slice
    /// and so no retain and release of the buffer.
    @inline(__always) func withBytes<R>(_ range: Range<Int>, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        storage.withUnsafeBytes { body(UnsafeRawBufferPointer(rebasing: $0[range])) }
    }

    /// The name of field `index` as raw bytes, valid during `body`.
    public func withName<R>(at index: Int, _ body: (UnsafeRawBufferPointer) -> R) -> R {
        withBytes(nameRange(index), body)
    }

    /// The name of field `index` as text (see `FieldName.decode`).
    public func name(at index: Int) -> String {
        withName(at: index) { FieldName.decode($0) }
    }

    /// Whether field `index` is named exactly `name` (compared as bytes).
    public func name(at index: Int, is name: String) -> Bool {
        let range = nameRange(index)
        // Borrowed through `utf8Span`: no copy of `name` (and no retain of its storage).
        return name.utf8Span.span.withUnsafeBufferPointer { wanted in
            wanted.count == range.count && (range.isEmpty || storage.withUnsafeBytes {
                memcmp($0.baseAddress! + range.lowerBound, wanted.baseAddress!, range.count) == 0
            })
        }
    }

    /// The value of the first field named `name`, if any.
    public func firstValue(_ name: String) -> ArraySlice<UInt8>? {
        index(named: name, from: 0, through: count - 1).map(value(at:))
    }

    /// The value of the last field named `name`, if any.
    public func lastValue(_ name: String) -> ArraySlice<UInt8>? {
        index(named: name, from: count - 1, through: 0).map(value(at:))
    }

    /// The first index from `start` towards `end` (either way) whose name is `name`'s bytes.
    private func index(named name: String, from start: Int, through end: Int) -> Int? {
        guard count > 0 else { return nil }
        let header = self.header
        return name.utf8Span.span.withUnsafeBufferPointer { wanted -> Int? in
            storage.withUnsafeBytes { bytes -> Int? in
                let step = start <= end ? 1 : -1
                var index = start
                while true {
                    // Name `index` spans boundaries 2 × index and 2 × index + 1.
                    let from = Int(bytes.loadUnaligned(fromByteOffset: 8 * index, as: UInt32.self))
                    let to = Int(bytes.loadUnaligned(fromByteOffset: 8 * index + 4, as: UInt32.self))
                    if to - from == wanted.count,
                       wanted.isEmpty || memcmp(bytes.baseAddress! + header + from, wanted.baseAddress!, wanted.count) == 0 {
                        return index
                    }
                    if index == end { return nil }
                    index += step
                }
            }
        }
    }

    /// Every field as a (name, value) pair, in order: for the rare paths (dead letters, retries,
    /// the operator tools) that want them as values of their own.
    public var pairs: [(name: String, value: [UInt8])] {
        (0..<count).map { (name(at: $0), Array(value(at: $0))) }
    }
}
