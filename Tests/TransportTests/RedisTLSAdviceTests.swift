import Testing

@testable import Transport

/// What OpenSSL says about a failed `rediss://` connection, turned into what to do (the
/// integration tests in `RedisTLSTests` produce each case with a real redis-server; these pin the
/// wording of the ones a test server cannot always produce, e.g. TLS 1.2 alerts).
@Suite struct RedisTLSAdviceTests {
    static let anonymous = RedisTLS(caFile: "/etc/herald/redis-ca.pem")
    static let withCertificate = RedisTLS(caFile: "/etc/herald/redis-ca.pem", certificateFile: "/etc/herald/client.pem",
                                          keyFile: "/etc/herald/client.key")

    @Test func notATLSPort() {
        for text in ["TLS handshake failed: error:0A00010B:SSL routines::wrong version number",
                     "error:0A0000C6:SSL routines::packet length too long", "error:0A000139:SSL routines::record layer failure"] {
            #expect(RedisTLSAdvice.failure(text, tls: Self.anonymous)?.contains(RedisTLSAdvice.notTLS) == true, "\(text)")
        }
    }

    @Test func aClientCertificateIsRequired() {
        let tls13 = RedisTLSAdvice.failure("error:0A00045C:SSL routines::tlsv13 alert certificate required", tls: Self.anonymous)
        #expect(tls13?.contains("--redis-cert and --redis-key") == true)
        // TLS 1.2 servers answer a missing certificate with a handshake failure alert.
        let tls12 = RedisTLSAdvice.failure("error:0A000410:SSL routines::sslv3 alert handshake failure", tls: Self.anonymous)
        #expect(tls12?.contains("requires a client certificate") == true)
    }

    @Test func theClientCertificateIsRejected() {
        for alert in ["tlsv1 alert unknown ca", "sslv3 alert bad certificate", "sslv3 alert certificate expired"] {
            let advice = RedisTLSAdvice.failure("error:0A000418:SSL routines::\(alert)", tls: Self.withCertificate)
            #expect(advice?.contains("rejected Herald's client certificate /etc/herald/client.pem") == true, "\(alert)")
        }
        #expect(RedisTLSAdvice.closedAfterHandshake("Connection reset by peer", tls: Self.withCertificate).contains("rejected"))
        #expect(RedisTLSAdvice.closedAfterHandshake("Connection reset by peer", tls: Self.anonymous).contains("--redis-cert"))
    }

    @Test func verificationSaysTrustOrName() {
        let untrusted = RedisTLSAdvice.handshakeFailed(.verificationFailed(host: "redis", reason: "unable to get local issuer certificate"),
                                                       tls: Self.anonymous)
        #expect(untrusted.contains("not trusted") && untrusted.contains("the CA file /etc/herald/redis-ca.pem"))
        let system = RedisTLSAdvice.handshakeFailed(.verificationFailed(host: "redis", reason: "self-signed certificate"), tls: RedisTLS())
        #expect(system.contains("the system CA store") && system.contains("--redis-ca-file"))
        let misnamed = RedisTLSAdvice.handshakeFailed(.verificationFailed(host: "10.0.0.5", reason: "IP address mismatch"),
                                                      tls: Self.anonymous)
        #expect(misnamed.contains("not valid for 10.0.0.5"))
    }

    @Test func somethingElseIsNotGuessedAt() {
        #expect(RedisTLSAdvice.failure("error:0A000086:SSL routines::certificate verify failed", tls: Self.anonymous) == nil)
    }
}
