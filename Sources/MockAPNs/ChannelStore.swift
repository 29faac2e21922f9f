/// How long APNs keeps a channel's last broadcast for devices that subscribe later: the
/// `message-storage-policy` of the channel management API.
public enum ChannelStoragePolicy: Int, Sendable, CaseIterable {
    /// 0: nothing is stored; broadcasts on the channel must carry `apns-expiration: 0`.
    case noStorage = 0
    /// 1: the most recent broadcast is stored for devices that join later.
    case mostRecent = 1
}

/// One broadcast channel the emulator issued.
public struct MockChannel: Sendable, Equatable {
    /// The opaque id APNs issues (standard base64 of 16 random bytes here).
    public let id: String
    public let storagePolicy: ChannelStoragePolicy
    /// The `push-type` the channel was created with (APNs knows only `LiveActivity`).
    public let pushType: String
    /// Broadcasts answered 200 on this channel.
    public internal(set) var broadcastsAccepted = 0

    /// The channel's settings as the channel management API reads them back.
    public func settingsJSON() -> String {
        "{\"message-storage-policy\":\(storagePolicy.rawValue),\"push-type\":\"\(pushType)\"}"
    }
}

/// What creating a channel can run into.
public enum ChannelStoreError: Error, Sendable, Equatable {
    /// The app already has `ChannelStore.maxChannelsPerApp` channels.
    case tooManyChannels
    /// The emulator already holds channels for `ChannelStore.maxApps` bundle ids.
    case tooManyApps
}

/// The emulator's channels, per bundle id, in memory and bounded: at most
/// `maxChannelsPerApp` channels per app (APNs' limit per app and environment) and at most
/// `maxApps` apps, so no client can make it grow without bound. Loop-confined, like the server.
public struct ChannelStore: Sendable {
    /// APNs' limit: 10,000 channels per app and environment.
    public static let defaultMaxChannelsPerApp = 10_000
    /// Bundle ids with channels; beyond it creating a channel for a new app fails like a full app.
    public static let maxApps = 1_000
    /// The longest channel id the emulator reads before calling it malformed (its own are 24).
    public static let maxChannelIDBytes = 64

    public let maxChannelsPerApp: Int
    private var apps: [String: [String: MockChannel]] = [:]
    /// Channels held, over every app.
    public private(set) var count = 0

    public init(maxChannelsPerApp: Int = ChannelStore.defaultMaxChannelsPerApp) {
        self.maxChannelsPerApp = max(1, maxChannelsPerApp)
    }

    /// Creates a channel with a fresh random id.
    public mutating func create(bundleID: String, storagePolicy: ChannelStoragePolicy, pushType: String = "LiveActivity") throws(ChannelStoreError) -> MockChannel {
        let existing = apps[bundleID]?.count ?? 0
        if existing == 0, apps[bundleID] == nil, apps.count >= ChannelStore.maxApps { throw .tooManyApps }
        guard existing < maxChannelsPerApp else { throw .tooManyChannels }
        var generator = SystemRandomNumberGenerator()
        var id: String
        repeat {
            var bytes: [UInt8] = []
            bytes.reserveCapacity(16)
            for _ in 0..<2 {
                var word = generator.next() as UInt64
                for _ in 0..<8 {
                    bytes.append(UInt8(truncatingIfNeeded: word))
                    word >>= 8
                }
            }
            id = ChannelStore.base64(bytes)
        } while apps[bundleID]?[id] != nil
        let channel = MockChannel(id: id, storagePolicy: storagePolicy, pushType: pushType)
        apps[bundleID, default: [:]][id] = channel
        count += 1
        return channel
    }

    /// The channel `id` of `bundleID`, if it exists (not deleted).
    public func channel(bundleID: String, id: String) -> MockChannel? {
        apps[bundleID]?[id]
    }

    /// Deletes a channel; false if it did not exist.
    @discardableResult
    public mutating func delete(bundleID: String, id: String) -> Bool {
        guard apps[bundleID]?.removeValue(forKey: id) != nil else { return false }
        count -= 1
        if apps[bundleID]?.isEmpty == true { apps[bundleID] = nil }
        return true
    }

    /// The ids of `bundleID`'s channels, sorted (stable output for the API and tests).
    public func ids(bundleID: String) -> [String] {
        (apps[bundleID]?.keys).map { $0.sorted() } ?? []
    }

    /// Counts one accepted broadcast on a channel; false if it no longer exists.
    @discardableResult
    mutating func countBroadcast(bundleID: String, id: String) -> Bool {
        guard apps[bundleID]?[id] != nil else { return false }
        apps[bundleID]![id]!.broadcastsAccepted += 1
        return true
    }

    /// Accepted broadcasts per existing channel, keyed `bundle id/channel id`.
    public func broadcastCounts() -> [String: Int] {
        var counts: [String: Int] = [:]
        for (bundle, channels) in apps {
            for (id, channel) in channels { counts[bundle + "/" + id] = channel.broadcastsAccepted }
        }
        return counts
    }

    /// Whether `text` has the form of a channel id: 1…`maxChannelIDBytes` bytes of standard
    /// base64 (A–Z, a–z, 0–9, `+`, `/`) with its `=` padding, a multiple of 4 long. Anything else
    /// is APNs' `BadChannelId`; a well-formed id the store does not know is `ChannelNotRegistered`.
    public static func isWellFormedID(_ text: String) -> Bool {
        let bytes = text.utf8
        guard !bytes.isEmpty, bytes.count <= maxChannelIDBytes, bytes.count % 4 == 0 else { return false }
        var padding = 0
        for byte in bytes {
            if byte == UInt8(ascii: "=") {
                padding += 1
                continue
            }
            // No data after padding.
            guard padding == 0 else { return false }
            let isAlphabet = (byte >= 0x41 && byte <= 0x5A) || (byte >= 0x61 && byte <= 0x7A) || (byte >= 0x30 && byte <= 0x39)
                || byte == UInt8(ascii: "+") || byte == UInt8(ascii: "/")
            guard isAlphabet else { return false }
        }
        return padding <= 2
    }

    /// Standard base64 with padding.
    static func base64(_ bytes: [UInt8]) -> String {
        let alphabet = Array("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/".utf8)
        var out: [UInt8] = []
        out.reserveCapacity((bytes.count + 2) / 3 * 4)
        var index = 0
        while index < bytes.count {
            let b0 = UInt32(bytes[index])
            let b1 = index + 1 < bytes.count ? UInt32(bytes[index + 1]) : 0
            let b2 = index + 2 < bytes.count ? UInt32(bytes[index + 2]) : 0
            let triple = b0 << 16 | b1 << 8 | b2
            out.append(alphabet[Int(triple >> 18 & 63)])
            out.append(alphabet[Int(triple >> 12 & 63)])
            out.append(index + 1 < bytes.count ? alphabet[Int(triple >> 6 & 63)] : UInt8(ascii: "="))
            out.append(index + 2 < bytes.count ? alphabet[Int(triple & 63)] : UInt8(ascii: "="))
            index += 3
        }
        return String(decoding: out, as: UTF8.self)
    }
}
