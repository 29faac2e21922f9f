/// Redis Cluster's key-to-slot function: CRC16 (XMODEM: polynomial 0x1021, initial value 0, no
/// reflection) of the key's hash tag, modulo 16384.
///
/// The hash tag is the text between the first `{` and the first `}` after it, when that text is
/// not empty; otherwise the whole key is hashed. Every key of a Herald queue is
/// `PREFIX:{QUEUE}:…`, so the queue name alone decides the slot, and the stream, the retry set,
/// the dead letters and the feedback stream always live on one node: the worker's Lua script
/// and its MULTI/EXEC of outcomes never span two slots.
public enum RedisClusterSlot {
    public static let count = 16384

    /// The slot of `key`, as `CLUSTER KEYSLOT key` answers it.
    public static func of(key: some StringProtocol) -> Int {
        var key = String(key)
        return key.withUTF8 { of(keyBytes: UnsafeRawBufferPointer($0)) }
    }

    /// The slot of every key of queue `queue` (its hash tag is the queue name).
    public static func of(queue: String) -> Int {
        // `{queue}` hashes the queue name, unless the name is empty or holds a `}` (then Redis
        // would read a different tag): hash the key as Redis would in every case.
        of(key: "{\(queue)}")
    }

    public static func of(keyBytes key: UnsafeRawBufferPointer) -> Int {
        var hashed = key
        if let open = key.firstIndex(of: UInt8(ascii: "{")),
           let close = key[(open + 1)...].firstIndex(of: UInt8(ascii: "}")), close > open + 1 {
            hashed = UnsafeRawBufferPointer(rebasing: key[(open + 1)..<close])
        }
        return Int(crc16(hashed)) & (count - 1)
    }

    /// CRC16-XMODEM, bit by bit: slots are computed when a queue is routed, never per notification.
    public static func crc16(_ bytes: UnsafeRawBufferPointer) -> UInt16 {
        var crc: UInt16 = 0
        for byte in bytes {
            crc ^= UInt16(byte) << 8
            for _ in 0..<8 {
                crc = crc & 0x8000 != 0 ? (crc << 1) ^ 0x1021 : crc << 1
            }
        }
        return crc
    }

    public static func crc16(_ text: String) -> UInt16 {
        var text = text
        return text.withUTF8 { crc16(UnsafeRawBufferPointer($0)) }
    }
}
