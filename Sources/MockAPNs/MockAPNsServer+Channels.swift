import APNs
import Transport

/// Broadcast push and the channel management API, as APNs serves them for Live Activities.
///
/// Broadcasts arrive on the push port (`POST /4/broadcasts/apps/<bundle id>`) and go through the
/// same faults, latency and counting as device pushes; the channel management API
/// (`/1/apps/<bundle id>/channels` and `/all-channels`) has its own listener (`channelsPort`), as
/// APNs has its own host for it, with the same certificate and provider-token checks, answered at
/// once and never subject to the stream faults.
///
/// Status choices where APNs' pages leave room: an unknown or deleted channel is 400
/// ChannelNotRegistered on a broadcast (a request error like every other broadcast rejection; 410
/// is the device-token answer and carries a `timestamp` a channel does not have) and 404
/// ChannelNotRegistered on the management API (the resource is not there). A full app is 400
/// CannotCreateChannelConfig, the reason APNs names for a channel it will not create.
extension MockAPNsServer {
    static let broadcastPrefix = "/4/broadcasts/apps/"
    static let channelsPrefix = "/1/apps/"

    // MARK: in-process API (tests)

    /// Creates a channel for `bundleID` as `POST /1/apps/<bundle id>/channels` would, and returns
    /// it (its `id` is what a broadcast's `apns-channel-id` names). Throws when the app already has
    /// `MockAPNsConfiguration.maxChannelsPerApp` channels. Loop thread only.
    public func createChannel(bundleID: String, storagePolicy: ChannelStoragePolicy = .noStorage) throws(ChannelStoreError) -> MockChannel {
        try channels.create(bundleID: bundleID, storagePolicy: storagePolicy)
    }

    /// Deletes a channel, as `DELETE /1/apps/<bundle id>/channels` would; false if it was not
    /// there. Broadcasts to it are answered 400 ChannelNotRegistered from then on. Loop thread only.
    @discardableResult
    public func deleteChannel(bundleID: String, id: String) -> Bool {
        channels.delete(bundleID: bundleID, id: id)
    }

    /// The channel `id` of `bundleID` with its settings and its count of accepted broadcasts, or
    /// nil when it does not exist (never created, or deleted). Loop thread only.
    public func channel(bundleID: String, id: String) -> MockChannel? {
        channels.channel(bundleID: bundleID, id: id)
    }

    /// The ids of `bundleID`'s channels, sorted. Loop thread only.
    public func channelIDs(bundleID: String) -> [String] {
        channels.ids(bundleID: bundleID)
    }

    /// Broadcasts answered 200 on a channel that still exists (0 for an unknown one). With
    /// `acceptedCount(apnsID:)` a test checks that each broadcast was delivered exactly once.
    public func broadcastCount(bundleID: String, channelID: String) -> Int {
        channels.channel(bundleID: bundleID, id: channelID)?.broadcastsAccepted ?? 0
    }

    // MARK: broadcast send (push port)

    /// Applies APNs' broadcast rules in the order APNs reports them: method and path, duplicate
    /// headers, `apns-id`, credentials, the feature switch, the bundle id, `apns-push-type`,
    /// `apns-channel-id`, `apns-priority`, `apns-expiration` against the channel's storage policy,
    /// then the payload (5120 bytes, Live Activity rules).
    func evaluateBroadcast(_ request: HTTP2ServerRequest, state: ConnectionState, certificateAuthenticated: Bool) -> Answer {
        let headerAPNsID = request.headerBytes("apns-id")
        var answer = acceptedAnswer(apnsID: headerAPNsID)
        let uuid = answer.uuid
        func reject(_ status: Int, _ reason: String) -> Answer {
            answer.status = status
            answer.reason = reason
            answer.uuid = nil
            // Still marked as a broadcast, so the answer carries apns-unique-id.
            answer.channelKey = ""
            return answer
        }
        guard request.method == "POST" else { return reject(405, "MethodNotAllowed") }
        // The rest of the path after the prefix's bytes (the route was matched on bytes).
        let bundleID = String(decoding: request.pathBytes.dropFirst(MockAPNsServer.broadcastPrefix.utf8.count), as: UTF8.self)
        guard !bundleID.isEmpty, !bundleID.contains("/"), bundleID.utf8.count <= Notification.maxBundleIDBytes else {
            return reject(404, "BadPath")
        }
        if request.hasDuplicateHeader(prefix: "apns-", orName: "authorization") {
            return reject(400, "DuplicateHeaders")
        }
        if headerAPNsID != nil, uuid == nil { return reject(400, "BadMessageId") }
        let now = configuration.time.nowMilliseconds()
        if !certificateAuthenticated, let (status, reason) = providerTokenRejection(request, state: state, now: now) {
            return reject(status, reason)
        }
        if configuration.broadcastDisabled { return reject(400, "FeatureNotEnabled") }
        if let rejection = bundleRejection(bundleID) { return reject(rejection.0, rejection.1) }
        guard request.header("apns-push-type").value == PushType.liveactivity.rawValue else { return reject(400, "InvalidPushType") }
        let channel: MockChannel
        switch lookUpChannel(request, bundleID: bundleID, unknownStatus: 400) {
        case .success(let found): channel = found
        case .failure(let rejection): return reject(rejection.status, rejection.reason)
        }
        if let text = request.header("apns-priority").value {
            guard let value = Int(text), value == 5 || value == 10 else { return reject(400, "BadPriority") }
        }
        if let text = request.header("apns-expiration").value {
            guard let value = Int64(text), value >= 0, value <= Notification.maxExpiration else { return reject(400, "BadExpirationDate") }
            // A channel that stores nothing cannot hold a broadcast for later.
            if channel.storagePolicy == .noStorage, value != 0 { return reject(400, "BadExpirationDate") }
        }
        if request.bodyTruncated { return reject(413, "PayloadTooLarge") }
        if let error = Notification.broadcastPayloadError(request.body[...]) {
            let (status, reason) = MockAPNsServer.apnsAnswer(for: error)
            return reject(status, reason)
        }
        answer.channelKey = bundleID + "/" + channel.id
        return answer
    }

    /// TopicMismatch when the bundle id carries a push-type suffix (a broadcast names the app
    /// itself) or differs from `--bundle-id`.
    private func bundleRejection(_ bundleID: String) -> (Int, String)? {
        if PushType.allCases.contains(where: { !$0.topicSuffix.isEmpty && bundleID.hasSuffix($0.topicSuffix) }) {
            return (400, "TopicMismatch")
        }
        if let expected = configuration.bundleID, expected != bundleID { return (400, "TopicMismatch") }
        return nil
    }

    struct ChannelRejection: Error {
        let status: Int
        let reason: String
    }

    /// The channel `apns-channel-id` names: MissingChannelId without the header, BadChannelId
    /// when it is not a channel id's form, ChannelNotRegistered (`unknownStatus`) when this app
    /// has no such channel.
    private func lookUpChannel(_ request: HTTP2ServerRequest, bundleID: String, unknownStatus: Int) -> Result<MockChannel, ChannelRejection> {
        guard let id = request.header("apns-channel-id").value, !id.isEmpty else {
            return .failure(ChannelRejection(status: 400, reason: "MissingChannelId"))
        }
        guard ChannelStore.isWellFormedID(id) else { return .failure(ChannelRejection(status: 400, reason: "BadChannelId")) }
        guard let channel = channels.channel(bundleID: bundleID, id: id) else {
            return .failure(ChannelRejection(status: unknownStatus, reason: "ChannelNotRegistered"))
        }
        return .success(channel)
    }

    /// Sends a broadcast's answer: like `send`, plus the `apns-unique-id` header APNs adds to
    /// broadcast answers, and per-channel counting of broadcasts.
    func sendWithUniqueID(_ answer: Answer, on connection: HTTP2ServerConnection, streamID: Int32) {
        let uniqueID = UUIDString.make(generatedID())
        let headers: [(name: String, value: String)] = [("apns-id", answer.apnsID), ("apns-unique-id", uniqueID)]
        // Counted when answered: an answer lost with its connection was not delivered.
        if answer.status == 200 {
            if let key = answer.channelKey {
                statistics.broadcastsAccepted += 1
                if let uuid = answer.uuid, acceptedIDs.increment(uuid) > 1 { statistics.broadcastDuplicates += 1 }
                if let slash = key.firstIndex(of: "/") {
                    channels.countBroadcast(bundleID: String(key[..<slash]), id: String(key[key.index(after: slash)...]))
                }
            } else {
                statistics.accepted += 1
                if let uuid = answer.uuid {
                    if acceptedIDs.increment(uuid) == 1 { statistics.acceptedUnique += 1 } else { statistics.duplicates += 1 }
                } else {
                    statistics.acceptedWithoutID += 1
                }
            }
            connection.respond(streamID: streamID, status: 200, headers: headers, body: [])
            return
        }
        let reason = answer.reason ?? "Unknown"
        statistics.rejected[reason, default: 0] += 1
        if let garbage = faults.garbageBody, garbage.rate > 0, garbage.rate >= 1 || draw() < garbage.rate {
            statistics.garbageBodies += 1
            connection.respond(streamID: streamID, status: answer.status, headers: headers, body: garbageBody(garbage.kind, reason: reason))
            return
        }
        var body = "{\"reason\":\"\(reason)\""
        if let timestamp = answer.timestamp { body += ",\"timestamp\":\(timestamp)" }
        body += "}"
        connection.respond(streamID: streamID, status: answer.status, headers: headers, body: Array(body.utf8))
    }

    // MARK: channel management API (channels port)

    struct ChannelAPIAnswer {
        var status: Int
        var headers: [(name: String, value: String)]
        var body: [UInt8]
    }

    /// Serves one request of the channel management API:
    ///
    /// | request | answer |
    /// | --- | --- |
    /// | `POST /1/apps/<bundle>/channels` body `{"message-storage-policy":0\|1,"push-type":"LiveActivity"}` | 201, `apns-channel-id` |
    /// | `GET /1/apps/<bundle>/channels` with `apns-channel-id` | 200, the channel's settings |
    /// | `DELETE /1/apps/<bundle>/channels` with `apns-channel-id` | 204 |
    /// | `GET /1/apps/<bundle>/all-channels` | 200, `{"channels":[…]}` |
    ///
    /// Every answer carries `apns-request-id` (the request's, or a fresh one); errors carry
    /// `{"reason":…}`: 404 BadPath, 405 MethodNotAllowed, 400 DuplicateHeaders, the 403/429
    /// provider-token reasons, 400 FeatureNotEnabled (`--broadcast-disabled`), 400 TopicMismatch,
    /// 413 PayloadTooLarge, 400 BadPayload (body not a JSON object), 400 BadMessageStoragePolicy,
    /// 400 InvalidPushType, 400 CannotCreateChannelConfig (app full), 400 MissingChannelId,
    /// 400 BadChannelId, 404 ChannelNotRegistered.
    func channelManagementAnswer(_ request: HTTP2ServerRequest, state: ConnectionState, certificateAuthenticated: Bool) -> ChannelAPIAnswer {
        statistics.channelRequests += 1
        let requestID = request.header("apns-request-id").value.flatMap { UUIDKey(canonical: $0) != nil ? $0 : nil } ?? UUIDString.make(generatedID())
        var headers: [(name: String, value: String)] = [("apns-request-id", requestID)]
        func reject(_ status: Int, _ reason: String) -> ChannelAPIAnswer {
            statistics.rejected[reason, default: 0] += 1
            return ChannelAPIAnswer(status: status, headers: headers, body: Array("{\"reason\":\"\(reason)\"}".utf8))
        }
        guard request.pathHasPrefix(MockAPNsServer.channelsPrefix) else { return reject(404, "BadPath") }
        let rest = Substring(String(decoding: request.pathBytes.dropFirst(MockAPNsServer.channelsPrefix.utf8.count), as: UTF8.self))
        guard let slash = rest.lastIndex(of: "/") else { return reject(404, "BadPath") }
        let bundleID = String(rest[..<slash])
        let resource = rest[rest.index(after: slash)...]
        guard !bundleID.isEmpty, !bundleID.contains("/"), bundleID.utf8.count <= Notification.maxBundleIDBytes,
              resource == "channels" || resource == "all-channels" else { return reject(404, "BadPath") }
        let allowed = resource == "channels" ? ["POST", "GET", "DELETE"] : ["GET"]
        guard allowed.contains(request.method) else { return reject(405, "MethodNotAllowed") }
        if request.hasDuplicateHeader(prefix: "apns-", orName: "authorization") {
            return reject(400, "DuplicateHeaders")
        }
        let now = configuration.time.nowMilliseconds()
        if !certificateAuthenticated, let (status, reason) = providerTokenRejection(request, state: state, now: now) {
            return reject(status, reason)
        }
        if configuration.broadcastDisabled { return reject(400, "FeatureNotEnabled") }
        if let rejection = bundleRejection(bundleID) { return reject(rejection.0, rejection.1) }

        if resource == "all-channels" {
            let list = channels.ids(bundleID: bundleID).map { "\"" + $0 + "\"" }.joined(separator: ",")
            return ChannelAPIAnswer(status: 200, headers: headers, body: Array("{\"channels\":[\(list)]}".utf8))
        }
        switch request.method {
        case "POST":
            if request.bodyTruncated { return reject(413, "PayloadTooLarge") }
            let parsed = request.body.withUnsafeBufferPointer { bytes -> Result<ChannelStoragePolicy, ChannelRejection> in
                let json = JSONScanner(bytes)
                guard let root = try? json.validate(), root.kind == .object else {
                    return .failure(ChannelRejection(status: 400, reason: "BadPayload"))
                }
                guard let policyValue = json.rootMember("message-storage-policy"), let number = json.int64(policyValue),
                      let policy = ChannelStoragePolicy(rawValue: Int(number)) else {
                    return .failure(ChannelRejection(status: 400, reason: "BadMessageStoragePolicy"))
                }
                guard let pushType = json.rootMember("push-type"), json.stringEquals(pushType, "LiveActivity") else {
                    return .failure(ChannelRejection(status: 400, reason: "InvalidPushType"))
                }
                return .success(policy)
            }
            let policy: ChannelStoragePolicy
            switch parsed {
            case .success(let value): policy = value
            case .failure(let rejection): return reject(rejection.status, rejection.reason)
            }
            do {
                let channel = try channels.create(bundleID: bundleID, storagePolicy: policy)
                statistics.channelsCreated += 1
                headers.append(("apns-channel-id", channel.id))
                return ChannelAPIAnswer(status: 201, headers: headers, body: [])
            } catch {
                return reject(400, "CannotCreateChannelConfig")
            }
        case "GET":
            switch lookUpChannel(request, bundleID: bundleID, unknownStatus: 404) {
            case .success(let channel):
                return ChannelAPIAnswer(status: 200, headers: headers, body: Array(channel.settingsJSON().utf8))
            case .failure(let rejection): return reject(rejection.status, rejection.reason)
            }
        default:  // DELETE
            switch lookUpChannel(request, bundleID: bundleID, unknownStatus: 404) {
            case .success(let channel):
                channels.delete(bundleID: bundleID, id: channel.id)
                statistics.channelsDeleted += 1
                return ChannelAPIAnswer(status: 204, headers: headers, body: [])
            case .failure(let rejection): return reject(rejection.status, rejection.reason)
            }
        }
    }
}
