import APNs
import CNGHTTP2
import Testing

@_spi(Benchmarks) @testable import Transport

/// Herald's client (`APNsConnection`) and the emulator's server connection (`HTTP2ServerConnection`)
/// wired back to back in memory, so the order in which bytes cross can be chosen exactly.
struct InMemoryHTTP2Tests {
    final class Server: HTTP2ServerConnectionDelegate {
        var received: [Int32] = []
        var requests: [HTTP2ServerRequest] = []
        func connection(_ connection: HTTP2ServerConnection, received request: HTTP2ServerRequest) {
            received.append(request.streamID)
            requests.append(request)
            connection.respond(streamID: request.streamID, status: 200, apnsID: nil, body: [])
        }
        func connectionClosed(_ connection: HTTP2ServerConnection, error: ConnectionError?) {}
    }

    final class Client: APNsConnectionDelegate {
        var outcomes: [UInt64: DeliveryOutcome] = [:]
        var closed = false
        func connectionIsReady(_ connection: APNsConnection) {}
        func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
            outcomes[request.context] = outcome
        }
        func connectionSlotsChanged(_ connection: APNsConnection) {}
        func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) { closed = true }
    }

    /// A client and a server connection wired in memory, SETTINGS exchanged (100 streams).
    final class Pair {
        let loop: EventLoop
        let server: HTTP2ServerConnection
        let client: APNsConnection
        let serverDelegate = Server()
        let clientDelegate = Client()

        init() throws {
            loop = try EventLoop()
            server = HTTP2ServerConnection(inMemoryOn: loop, initialMaxConcurrentStreams: 100)
            client = APNsConnection(
                loop: loop, host: "api.push.apple.com", port: 443, tlsContext: try TLSContext(clientTrusting: nil), maxStreams: 100)
            server.delegate = serverDelegate
            client.delegate = clientDelegate
            client.setAuthorization(jwt: "header.claims.signature", generation: 1)
            try client.startInMemory()
            try server.startInMemory()
            for _ in 0..<4 { _ = clientToServer(); _ = serverToClient() }
            try #require(client.streamSlots == 100, "the server's SETTINGS reached the client")
        }

        func clientToServer() -> Int { client.sendInMemory { server.receiveInMemory($0) } }
        func serverToClient() -> Int { server.sendInMemory { client.receiveInMemory($0) } }
    }

    static func request(_ index: UInt64, payload: ArraySlice<UInt8> = Array(#"{"aps":{"alert":"hi"}}"#.utf8)[...]) -> PendingRequest {
        let notification = Notification(
            deviceToken: String(repeating: "ab", count: 32), topic: "com.example.herald", pushType: .alert,
            apnsID: UUIDString.make(high: 0x4845_5241_4c44, low: index), payload: payload)
        return PendingRequest(notification: notification, context: index)
    }

    /// A GOAWAY the server decided on but could not write yet (its socket was full) must still
    /// bind it: requests that arrive meanwhile on higher streams are refused, not answered. The
    /// client reads them as "not processed" and resends them; had the server answered them too,
    /// each would be delivered twice (seen in CI as hundreds of duplicates under GOAWAY storms).
    @Test func streamsArrivingAfterAnUnsentGoAwayAreRefusedNotAnswered() throws {
        let pair = try Pair()
        let (server, client, serverDelegate, clientDelegate) = (pair.server, pair.client, pair.serverDelegate, pair.clientDelegate)
        func clientToServer() -> Int { pair.clientToServer() }
        func serverToClient() -> Int { pair.serverToClient() }

        // Stream 1 reaches the server, which answers it and decides to go away after it.
        #expect(client.submit(Self.request(1)))
        _ = clientToServer()
        #expect(serverDelegate.received == [1])
        server.sendGoAway(lastStreamID: 1, reasonJSON: #"{"reason":"Shutdown"}"#)

        // Before the GOAWAY leaves the server, the client opens streams 3 and 5.
        #expect(client.submit(Self.request(3)))
        #expect(client.submit(Self.request(5)))
        _ = clientToServer()
        #expect(serverDelegate.received == [1], "streams above the GOAWAY's last_stream_id never reach the emulator")
        #expect(server.streamsRefusedAfterGoAway == 2)

        // Now everything crosses: stream 1 is accepted, 3 and 5 come back as never processed.
        var moved = 1
        var rounds = 0
        while moved > 0 && rounds < 20 {
            moved = serverToClient() + clientToServer()
            rounds += 1
        }
        #expect(clientDelegate.outcomes[1] == .accepted)
        for index: UInt64 in [3, 5] {
            let outcome = clientDelegate.outcomes[index]
            guard case .retryOnAnotherConnection(let cause)? = outcome else {
                Issue.record("stream of request \(index): \(String(describing: outcome))")
                continue
            }
            #expect(!cause.countsAsAttempt, "request \(index) was not processed: \(cause)")
        }
        #expect(clientDelegate.outcomes.count == 3)
    }

    /// The client's nghttp2 session allocates from a per-connection pool: while streams run, the
    /// pool recycles blocks; when the session is deleted every block has come back to it.
    /// The header list as the server decodes it, request after request on one connection: one
    /// `apns-id` in 1,024 is indexed so the others name the header by its index, and header names
    /// go to nghttp2 uncopied. Every request must still arrive whole, with its own apns-id and
    /// nothing else changed, over rounds that carry the HPACK table's state past a re-indexing.
    @Test func everyRequestsHeadersArriveIntactWithTheNameIndexed() throws {
        let pair = try Pair()
        var sent: [UInt64] = []
        for round in 0..<30 {
            for index in 0..<40 {
                let context = UInt64(round * 100 + index)
                #expect(pair.client.submit(Self.request(context)))
                sent.append(context)
            }
            var rounds = 0
            while pair.clientToServer() + pair.serverToClient() > 0 && rounds < 50 { rounds += 1 }
        }
        let requests = pair.serverDelegate.requests
        try #require(requests.count == sent.count, "\(requests.count) of \(sent.count) arrived")
        for (request, context) in zip(requests, sent) {
            #expect(request.method == "POST" && request.path == "/3/device/" + String(repeating: "ab", count: 32)
                    && request.authority == "api.push.apple.com")
            let names = request.headers.map(\.name)
            #expect(names == ["apns-push-type", "apns-topic", "apns-id", "authorization"], "\(names)")
            let values = Dictionary(request.headers.map { ($0.name, $0.value) }, uniquingKeysWith: { first, _ in first })
            #expect(values["apns-id"] == UUIDString.make(high: 0x4845_5241_4c44, low: context), "stream \(request.streamID)")
            #expect(values["apns-topic"] == "com.example.herald" && values["apns-push-type"] == "alert"
                    && values["authorization"] == "bearer header.claims.signature")
        }
        #expect(pair.clientDelegate.outcomes.count == sent.count)
    }

    /// Records the contexts it is told are about to complete, and how many completions the
    /// client's delegate had seen by then.
    final class Prefetcher: CompletionPrefetching {
        let client: Client
        var batches: [(contexts: [UInt64], outcomesBefore: Int)] = []
        init(_ client: Client) { self.client = client }
        func prefetch(contexts: UnsafeBufferPointer<UInt64>) { batches.append((Array(contexts), client.outcomes.count)) }
    }

    /// The prefetcher hears every context of a batch of answers before any of them is handed
    /// out, and the requests still complete one by one with their own outcome.
    @Test func aBatchOfAnswersIsAnnouncedToThePrefetcherBeforeItsCompletions() throws {
        let pair = try Pair()
        let prefetcher = Prefetcher(pair.clientDelegate)
        pair.client.prefetcher = prefetcher
        for context in 1...60 as ClosedRange<UInt64> { #expect(pair.client.submit(Self.request(context))) }
        _ = pair.clientToServer()
        #expect(pair.serverDelegate.received.count == 60)
        // The answers arrive in one read, as from a socket (the in-memory pipe hands over one
        // frame at a time).
        var answers: [UInt8] = []
        _ = pair.server.sendInMemory { answers.append(contentsOf: $0) }
        answers.withUnsafeBytes { pair.client.receiveInMemory($0) }
        #expect(pair.clientDelegate.outcomes.count == 60)
        #expect(pair.clientDelegate.outcomes.values.allSatisfy { if case .accepted = $0 { true } else { false } })
        let announced = prefetcher.batches.flatMap(\.contexts)
        #expect(announced.sorted() == Array(1...60), "every context announced once")
        // Each batch was announced before any of its completions reached the delegate.
        var completedBefore = 0
        for batch in prefetcher.batches {
            #expect(batch.outcomesBefore == completedBefore)
            completedBefore += batch.contexts.count
        }
    }

    /// The headers a completion's release writes: the request's template (the job, in the
    /// worker) and 32 bytes before its token's bytes; a packed token has no string to release.
    @Test func aRequestNamesItsTemplateAndTokenHeaders() throws {
        let request = Self.request(1)
        let headers = request.objectHeaders
        #expect(headers.source == UnsafeRawPointer(Unmanaged.passUnretained(request.source).toOpaque()))
        let text = try #require(request.token.text)
        let token = try #require(text.utf8Span.span.withUnsafeBufferPointer { $0.baseAddress })
        #expect(headers.token.map { $0 + 32 } == UnsafeRawPointer(token))
        let packed = PendingRequest(source: request.source, token: DeviceToken(lowercasing: Array(text.utf8)[...]),
                                    apnsIDBits: request.apnsIDBits, context: 2)
        #expect(packed.token.isPacked)
        #expect(packed.objectHeaders.token == nil)
        #expect(packed.objectHeaders.source == headers.source)
    }

    /// A request names its template and carries its own token and apns-id: the notification it
    /// stands for, read whole, is the one it was made from, and the headers on the wire are
    /// that notification's (`withHeaders(for:)` of the request and of the notification agree).
    @Test func aRequestSendsTheNotificationItWasMadeFrom() throws {
        let notification = Notification(
            deviceToken: String(repeating: "cd", count: 32), topic: "com.example.herald", pushType: .background,
            expiration: 1_700_000_000, collapseID: "score", apnsID: UUIDString.make(high: 7, low: 9),
            payload: Array(#"{"aps":{"content-available":1}}"#.utf8))
        let request = PendingRequest(notification: notification, context: 3)
        #expect(request.notification.deviceToken == notification.deviceToken)
        #expect(request.notification.apnsID == notification.apnsID)
        #expect(request.apnsIDText == notification.apnsID && request.apnsIDBits == nil)
        #expect(request.apnsID == notification.apnsID)
        #expect(Array(request.notification.payload) == Array(notification.payload))
        let builder = RequestHeaderBuilder(authority: "api.push.apple.com")
        func pairs(_ nva: UnsafePointer<nghttp2_nv>, _ count: Int) -> [String] {
            (0..<count).map {
                String(decoding: UnsafeBufferPointer(start: UnsafePointer(nva[$0].name), count: nva[$0].namelen), as: UTF8.self) + ": "
                    + String(decoding: UnsafeBufferPointer(start: UnsafePointer(nva[$0].value), count: nva[$0].valuelen), as: UTF8.self)
            }
        }
        let fromRequest = try #require(builder.withHeaders(for: request, authorizationBytes: nil, pairs))
        let fromNotification = try #require(builder.withHeaders(for: notification, authorizationBytes: nil, pairs))
        #expect(fromRequest == fromNotification)
        #expect(fromRequest.contains(":path: /3/device/" + String(repeating: "cd", count: 32)))
        #expect(fromRequest.contains("apns-id: " + notification.apnsID!))
        // Another token and apns-id on the same template: only those two headers differ.
        let other = PendingRequest(source: request.source, token: DeviceToken(String(repeating: "ef", count: 32)),
                                   apnsIDBits: UUIDBits(high: 1, low: 2), context: 4)
        #expect(other.apnsID == UUIDString.make(UUIDBits(high: 1, low: 2)) && other.apnsIDText == nil)
        let fromOther = try #require(builder.withHeaders(for: other, authorizationBytes: nil, pairs))
        #expect(fromOther.filter { !fromRequest.contains($0) }.sorted()
                == [":path: /3/device/" + String(repeating: "ef", count: 32), "apns-id: " + UUIDString.make(UUIDBits(high: 1, low: 2))].sorted())
    }

    /// The DATA frames are copied from the payload's bytes as noted at submit: a payload that is
    /// a slice starting inside its array, and payloads larger than a frame and than the
    /// connection's flow-control window (so each is read in pieces, some after a window update),
    /// arrive byte for byte. The bytes outlive the moves of their request into and out of the slot.
    @Test func payloadsArriveByteForByteWhenReadInPieces() throws {
        let pair = try Pair()
        let (client, serverDelegate) = (pair.client, pair.serverDelegate)
        var sent: [[UInt8]] = []
        var rounds = 0
        repeat {
            // 30,000 bytes each, 120,000 in all: each is two or more DATA frames, and together
            // they exceed the 65,535-byte window the connection starts with (the third is cut by
            // it; the fourth is taken once a window update came).
            while sent.count < 4 && client.streamSlots > 0 {
                let context = UInt64(sent.count)
                let storage = (0..<30_007).map { UInt8(truncatingIfNeeded: $0 &* 7 &+ Int(context)) }
                let request = Self.request(context, payload: storage[5..<30_005])
                sent.append(Array(storage[5..<30_005]))
                #expect(client.submit(request))
            }
            rounds += 1
        } while pair.clientToServer() + pair.serverToClient() > 0 && rounds < 200
        #expect(sent.count == 4)
        #expect(serverDelegate.requests.count == 4)
        for request in serverDelegate.requests {
            let index = Int((request.streamID - 1) / 2)
            #expect(!request.bodyTruncated)
            // Compared apart, so a failure names the first differing byte instead of printing both.
            let firstDifference = zip(request.body, sent[index]).enumerated().first { $0.element.0 != $0.element.1 }?.offset
            #expect(request.body.count == sent[index].count && firstDifference == nil,
                    "stream \(request.streamID): \(request.body.count) bytes arrived, first difference at \(firstDifference.map(String.init) ?? "none")")
        }
        #expect(pair.clientDelegate.outcomes.count == 4 && pair.clientDelegate.outcomes.values.allSatisfy { $0 == .accepted })
    }

    /// A delegate that takes its batches itself: it takes one completion of each and leaves the
    /// rest, and may close the connection in the middle of one.
    final class BatchClient: APNsConnectionDelegate {
        var taken: [(context: UInt64, outcome: DeliveryOutcome, inBatch: Bool)] = []
        var batches = 0
        var closeInNextBatch = false
        func connectionIsReady(_ connection: APNsConnection) {}
        func connectionHasCompletions(_ connection: APNsConnection) {
            batches += 1
            var request: PendingRequest?
            if let outcome = connection.nextCompletion(into: &request) {
                taken.append((request!.context, outcome, true))
            }
            if closeInNextBatch {
                closeInNextBatch = false
                connection.close()
            }
        }
        func connection(_ connection: APNsConnection, completed request: consuming PendingRequest, outcome: DeliveryOutcome) {
            taken.append((request.context, outcome, false))
        }
        func connectionSlotsChanged(_ connection: APNsConnection) {}
        func connectionClosed(_ connection: APNsConnection, error: ConnectionError?) {}
    }

    /// Completions go to the delegate in batches (one call per read); whatever its batch leaves
    /// is handed over one by one after it, so none is dropped, and none is handed out twice
    /// even when the delegate closes the connection in the middle of a batch (the close
    /// completes every stream still held, inside the batch).
    @Test func aBatchTheDelegateLeavesIsHandedOverOneByOneAndNothingTwice() throws {
        let pair = try Pair()
        let client = pair.client
        let delegate = BatchClient()
        client.delegate = delegate
        var none: PendingRequest?
        #expect(client.nextCompletion(into: &none) == nil && none == nil, "outside a batch there is nothing to take")

        for context in 0..<UInt64(10) { #expect(client.submit(Self.request(context))) }
        _ = pair.clientToServer()
        _ = pair.serverToClient()
        #expect(delegate.batches >= 1)
        #expect(delegate.taken.filter(\.inBatch).count == delegate.batches, "one taken in each batch")
        #expect(delegate.taken.map(\.context).sorted() == Array(0..<10), "each answer once: \(delegate.taken.map(\.context))")
        #expect(delegate.taken.allSatisfy { $0.outcome == .accepted })
        #expect(client.streamSlots == 100, "every slot is free again")

        // Ten more are answered; five after them never leave the client. The delegate closes the
        // connection in the batch of the ten answers.
        delegate.taken = []
        for context in 10..<UInt64(20) { #expect(client.submit(Self.request(context))) }
        _ = pair.clientToServer()
        for context in 20..<UInt64(25) { #expect(client.submit(Self.request(context))) }
        delegate.closeInNextBatch = true
        _ = pair.serverToClient()
        let contexts = delegate.taken.map(\.context)
        #expect(contexts.sorted() == Array(10..<25), "each request once: \(contexts)")
        func isRetry(_ outcome: DeliveryOutcome) -> Bool {
            if case .retryOnAnotherConnection = outcome { true } else { false }
        }
        // Answers read before the close are accepted; any the close cut off are handed back.
        #expect(delegate.taken.first?.outcome == .accepted)
        #expect(delegate.taken.filter { $0.context < 20 }.allSatisfy { $0.outcome == .accepted || isRetry($0.outcome) })
        #expect(delegate.taken.filter { $0.context >= 20 }.allSatisfy { isRetry($0.outcome) },
                "the unsent ones are handed back to be sent elsewhere")
        #expect(client.state == .closed)
        #expect(client.nextCompletion(into: &none) == nil && none == nil)
    }

    @Test func pooledSessionReturnsEveryBlock() throws {
        let pair = try Pair()
        let (client, clientDelegate) = (pair.client, pair.clientDelegate)
        func pump() -> Int { pair.clientToServer() + pair.serverToClient() }

        var next: UInt64 = 0
        for _ in 0..<5 {
            while client.streamSlots > 0 {
                #expect(client.submit(Self.request(next)))
                next += 1
            }
            var rounds = 0
            while pump() > 0 && rounds < 50 { rounds += 1 }
        }
        #expect(clientDelegate.outcomes.count == 500 && clientDelegate.outcomes.values.allSatisfy { $0 == .accepted })
        // Both ends: the server's session (the emulator's) allocates from its own pool too.
        for (end, usage) in [("client", client.poolUsage), ("server", pair.server.poolUsage)] {
            #expect(usage.liveBlocks > 0, "the \(end)'s session allocates from the pool")
            #expect(usage.heldBytes > 0, "finished streams' blocks wait in the \(end)'s free lists")
        }

        client.close()
        let closed = client.poolUsage
        #expect(closed.liveBlocks == 0, "nghttp2 returned every block when the session was deleted: \(closed)")
        #expect(closed.heldBytes <= 2 * 1024 * 1024, "the free lists are capped")
        #expect(clientDelegate.closed)
        pair.server.terminate(nil)
        let serverClosed = pair.server.poolUsage
        #expect(serverClosed.liveBlocks == 0 && serverClosed.heldBytes <= 2 * 1024 * 1024, "\(serverClosed)")
    }

    /// The client's first SETTINGS turn the RFC 7540 priority tree off (RFC 9218's
    /// SETTINGS_NO_RFC7540_PRIORITIES = 1) besides refusing pushes and opening its windows.
    @Test func theFirstSettingsTurnTheRFC7540PriorityTreeOff() throws {
        let loop = try EventLoop()
        let client = APNsConnection(
            loop: loop, host: "api.push.apple.com", port: 443, tlsContext: try TLSContext(clientTrusting: nil), maxStreams: 10)
        try client.startInMemory()
        var bytes: [UInt8] = []
        _ = client.sendInMemory { bytes.append(contentsOf: $0) }
        let preface = Array("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".utf8)
        try #require(bytes.count >= preface.count + 9 && Array(bytes.prefix(preface.count)) == preface, "\(bytes.count) bytes")
        let frame = bytes[preface.count...]
        let start = frame.startIndex
        let length: Int = Int(frame[start]) << 16 | Int(frame[start + 1]) << 8 | Int(frame[start + 2])
        let type = frame[start + 3]
        try #require(type == 0x4 && length % 6 == 0 && frame.count >= 9 + length, "a SETTINGS frame first")
        var settings: [UInt16: UInt32] = [:]
        var at = start + 9
        while at < start + 9 + length {
            let id: UInt16 = UInt16(frame[at]) << 8 | UInt16(frame[at + 1])
            var value: UInt32 = 0
            for byte in frame[(at + 2)..<(at + 6)] { value = value << 8 | UInt32(byte) }
            settings[id] = value
            at += 6
        }
        let expected: [UInt16: UInt32] = [0x2: 0, 0x3: 0, 0x4: 1 << 20, 0x9: 1]
        #expect(settings == expected, "\(settings)")
        client.close()
    }

    /// 4,000-byte payloads: the 65,535-byte window a connection starts with takes 16 and part of
    /// the 17th.
    static func largeRequest(_ context: UInt64) -> PendingRequest {
        Self.request(context, payload: ArraySlice((0..<4_000).map { UInt8(truncatingIfNeeded: $0 &+ Int(context)) }))
    }

    /// The connection opens no stream whose DATA the server's connection window cannot take yet:
    /// once the payloads submitted fill the window, `streamSlots` is 0 (the request waits in the
    /// caller's queue, not half-sent inside nghttp2), and the window update that arrives with the
    /// server's next bytes opens the slots again.
    @Test func noStreamIsOpenedWhoseDataTheWindowCannotTake() throws {
        let pair = try Pair()
        var submitted: UInt64 = 0
        while pair.client.streamSlots > 0 {
            #expect(pair.client.submit(Self.largeRequest(submitted)))
            submitted += 1
        }
        // 16 payloads leave 1,535 bytes of window: the 17th may start, the 18th waits.
        #expect(submitted == 17 && pair.client.unsentPayloadBytes == 17 * 4_000)
        #expect(!pair.client.submit(Self.largeRequest(99)), "a submit past the window is refused, not queued")
        _ = pair.clientToServer()
        #expect(pair.client.unsentPayloadBytes == 4_000 - 1_535 && pair.client.streamSlots == 0)
        // The server took 16 requests (and answers them) and 64 KB: its WINDOW_UPDATE reopens the slots.
        _ = pair.serverToClient()
        #expect(pair.clientDelegate.outcomes.count == 16)
        #expect(pair.client.streamSlots > 0)
        var rounds = 0
        while pair.clientToServer() + pair.serverToClient() > 0 && rounds < 20 { rounds += 1 }
        #expect(pair.clientDelegate.outcomes.count == 17 && pair.client.unsentPayloadBytes == 0)
    }

    /// A stream reset before all of its DATA left gives its share of the window back: otherwise
    /// each such stream would shrink the connection's room for good, until it opened no stream.
    @Test func aStreamResetBeforeItsDataLeftGivesItsShareOfTheWindowBack() throws {
        let pair = try Pair()
        for context in 0..<UInt64(17) { #expect(pair.client.submit(Self.largeRequest(context))) }
        _ = pair.clientToServer()
        #expect(pair.serverDelegate.received.count == 16 && pair.client.unsentPayloadBytes == 4_000 - 1_535)
        // The 17th (stream 33) is cut by the window; the server cancels it.
        pair.server.resetStream(streamID: 33, errorCode: 8)
        _ = pair.serverToClient()
        _ = pair.clientToServer()
        _ = pair.serverToClient()
        #expect(pair.clientDelegate.outcomes.count == 17 && pair.client.inFlight == 0)
        #expect(pair.client.unsentPayloadBytes == 0 && pair.client.streamSlots == 100)
        guard case .retryOnAnotherConnection(.streamReset(errorCode: 8))? = pair.clientDelegate.outcomes[16] else {
            Issue.record("the cancelled stream: \(String(describing: pair.clientDelegate.outcomes[16]))")
            return
        }
    }

    /// Payloads held back by the server's flow-control window leave in the order their streams
    /// were submitted: the stream whose DATA the window cut in two goes on first when it opens,
    /// not after the streams submitted once it opened (nghttp2's RFC 7540 scheduler moved a stream
    /// to the back of its queue after each DATA frame; with that scheduler this test fails). So
    /// no request waits behind later ones.
    @Test func payloadsHeldByFlowControlLeaveInTheOrderTheirStreamsWereSubmitted() throws {
        let pair = try Pair()
        var submitted: UInt64 = 0
        var rounds = 0
        repeat {
            // As a pool does: whatever the connection takes now, then the bytes each way.
            while submitted < 40 && pair.client.streamSlots > 0 {
                #expect(pair.client.submit(Self.largeRequest(submitted)))
                submitted += 1
            }
            rounds += 1
        } while pair.clientToServer() + pair.serverToClient() > 0 && rounds < 200
        let all: [Int32] = (0..<40).map { Int32(2 * $0 + 1) }
        #expect(pair.serverDelegate.received == all, "\(pair.serverDelegate.received)")
        #expect(pair.serverDelegate.requests.allSatisfy { $0.body.count == 4_000 && !$0.bodyTruncated })
        #expect(pair.clientDelegate.outcomes.count == 40 && pair.clientDelegate.outcomes.values.allSatisfy { $0 == .accepted })
    }
}
