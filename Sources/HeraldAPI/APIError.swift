import Hummingbird
import Queue

/// An HTTP header name (HTTPTypes' `HTTPField.Name`, reached through Hummingbird's `HTTPFields`).
typealias HeaderName = HTTPFields.Element.Name
/// An HTTP status (HTTPTypes' `HTTPResponse.Status`).
typealias Status = HTTPResponse.Status

/// A request the API refuses, with the status, a stable code for machines and a message that
/// says what to do. Every error body has one shape: `{"error":{"code":…,"message":…}}`, plus
/// `invalid` (per-job reasons) on 422 for a batch.
public struct APIError: Error, Sendable {
    public let status: HTTPResponse.Status
    public let code: String
    public let message: String
    /// Extra members of the body beside `error` (the per-job reasons of a 422).
    let extra: [(String, JSONValue)]
    /// Headers to add (WWW-Authenticate on 401, Retry-After on 503).
    let headers: [(HeaderName, String)]

    init(_ status: HTTPResponse.Status, _ code: String, _ message: String, extra: [(String, JSONValue)] = [],
         headers: [(HeaderName, String)] = []) {
        self.status = status
        self.code = code
        self.message = message
        self.extra = extra
        self.headers = headers
    }

    func response() -> Response {
        let body: JSONValue = .object([("error", .object([("code", .string(code)), ("message", .string(message))]))] + extra)
        var fields = HTTPFields()
        fields[.contentType] = "application/json"
        for (name, value) in headers { fields[name] = value }
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: body.bytes())))
    }

    static func malformed(_ message: String) -> APIError { APIError(.badRequest, "malformed_request", message) }
}

extension JSONValue {
    /// A JSON response with `status`.
    func response(_ status: HTTPResponse.Status, headers extra: [(HeaderName, String)] = []) -> Response {
        var fields = HTTPFields()
        fields[.contentType] = "application/json"
        for (name, value) in extra { fields[name] = value }
        return Response(status: status, headers: fields, body: .init(byteBuffer: ByteBuffer(bytes: bytes())))
    }
}
