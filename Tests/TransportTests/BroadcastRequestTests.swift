import APNs
import Testing

@_spi(Benchmarks) @testable import Transport

/// A broadcast as it crosses HTTP/2 (client and server wired in memory): its path, headers and
/// body, next to a device push on the same connection, which must not change.
struct BroadcastRequestTests {
    final class Server: HTTP2ServerConnectionDelegate {
        var requests: [HTTP2ServerRequest] = []
        func connection(_ connection: HTTP2ServerConnection, received request: HTTP2ServerRequest) {
            requests.append(request)
            connection.respond(streamID: request.streamID, status: 200, apnsID: nil, body: [])
        }
        func connectionClosed(_ connection: HTTP2ServerConnection, error: ConnectionError?) {}
    }

    /// A client connection and a server wired in memory, past their SETTINGS exchange.
    final class Pair {
        let loop: EventLoop
        let server: HTTP2ServerConnection
        let client: APNsConnection
        let serverDelegate = Server()
        let clientDelegate = InMemoryHTTP2Tests.Client()

        init() throws {
            loop = try EventLoop()
            server = HTTP2ServerConnection(inMemoryOn: loop, initialMaxConcurrentStreams: 100)
            client = APNsConnection(loop: loop, host: "api.push.apple.com", port: 443,
                                    tlsContext: try TLSContext(clientTrusting: nil), maxStreams: 100)
            server.delegate = serverDelegate
            client.delegate = clientDelegate
            client.setAuthorization(jwt: "header.claims.signature", generation: 1)
            try client.startInMemory()
            try server.startInMemory()
            exchange()
        }

        func exchange() {
            for _ in 0..<8 {
                _ = client.sendInMemory { server.receiveInMemory($0) }
                _ = server.sendInMemory { client.receiveInMemory($0) }
            }
        }
    }

    @Test func aBroadcastGoesToTheAppsBroadcastPathWithItsChannelAndNoTopic() throws {
        let pair = try Pair()
        let (client, serverDelegate, clientDelegate) = (pair.client, pair.serverDelegate, pair.clientDelegate)
        let payload = Array(#"{"aps":{"timestamp":1,"event":"update","content-state":{}}}"#.utf8)
        var broadcast = Notification(deviceToken: "dHN0LXNyY2gtY2hubA==", topic: "com.example.herald", pushType: .liveactivity,
                                     expiration: 0, apnsID: UUIDString.make(high: 1, low: 2), payload: payload)
        broadcast.isBroadcast = true
        #expect(client.submit(PendingRequest(notification: broadcast, context: 1)))
        #expect(client.submit(InMemoryHTTP2Tests.request(2)))
        pair.exchange()
        try #require(serverDelegate.requests.count == 2)
        let request = serverDelegate.requests[0]
        #expect(request.method == "POST")
        #expect(request.path == "/4/broadcasts/apps/com.example.herald")
        #expect(request.header("apns-channel-id").value == "dHN0LXNyY2gtY2hubA==")
        #expect(request.header("apns-push-type").value == "liveactivity")
        #expect(request.header("apns-priority").value == "10")
        #expect(request.header("apns-expiration").value == "0")
        #expect(request.header("apns-id").value == UUIDString.make(high: 1, low: 2))
        #expect(request.header("apns-topic").count == 0)
        #expect(request.header("apns-collapse-id").count == 0)
        #expect(request.header("authorization").value == "bearer header.claims.signature")
        #expect(request.body == payload)
        let device = serverDelegate.requests[1]
        #expect(device.path == "/3/device/" + String(repeating: "ab", count: 32))
        #expect(device.header("apns-topic").value == "com.example.herald")
        #expect(device.header("apns-channel-id").count == 0)
        #expect(clientDelegate.outcomes[1] == .accepted)
        #expect(clientDelegate.outcomes[2] == .accepted)
    }

    /// The worker keeps a 64-digit token packed (`DeviceToken`): the request path carries its
    /// digits in lowercase, exactly as a token kept as text would be written.
    @Test func aPackedTokenIsWrittenAsItsDigits() throws {
        let pair = try Pair()
        let (client, serverDelegate, clientDelegate) = (pair.client, pair.serverDelegate, pair.clientDelegate)
        let texts = ["0123456789ABCDEF" + String(repeating: "fedcba9876543210", count: 3), String(repeating: "7", count: 64),
                     String(repeating: "ab", count: 20)]
        for (index, text) in texts.enumerated() {
            var notification = Notification(deviceToken: "", topic: "com.example.herald", pushType: .alert, payload: Array("{}".utf8))
            notification.token = Array(text.utf8).withUnsafeBytes { DeviceToken(lowercasing: $0) }
            #expect(notification.token.isPacked == (text.utf8.count == 64))
            #expect(client.submit(PendingRequest(notification: notification, context: UInt64(index))))
        }
        pair.exchange()
        try #require(serverDelegate.requests.count == texts.count)
        for (index, text) in texts.enumerated() {
            #expect(serverDelegate.requests[index].path == "/3/device/" + text.lowercased())
            #expect(clientDelegate.outcomes[UInt64(index)] == .accepted)
        }
    }
}
