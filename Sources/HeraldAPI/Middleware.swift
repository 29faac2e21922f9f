import Hummingbird
import Logging
import NIOCore
import Synchronization

/// Outermost: counts and times every request by route template and status, and turns every
/// error into Herald's JSON error body (`APIError`), including Hummingbird's own (404, 413).
struct ObservingMiddleware<Context: RequestContext>: RouterMiddleware {
    let metrics: APIMetrics
    let logger: Logger

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let started = ContinuousClock.now
        metrics.inFlight.increment()
        defer { metrics.inFlight.decrement() }
        var response: Response
        do {
            response = try await next(request, context)
        } catch {
            var apiError = ObservingMiddleware.apiError(error)
            if apiError.status == .notFound, let allowed = RouteTable.methods(forPath: request.uri.path), !allowed.isEmpty {
                apiError = APIError(.methodNotAllowed, "method_not_allowed",
                                    "\(request.uri.path) takes \(allowed.joined(separator: " and ")), not \(request.method.rawValue).",
                                    headers: [(.allow, allowed.joined(separator: ", "))])
            }
            if apiError.status.code >= 500 {
                // The path and the error, never headers or the body: they may hold tokens.
                logger.error("\(request.method) \(context.endpointPath ?? "unmatched") failed: \(apiError.message)")
            }
            response = apiError.response()
        }
        let route = context.endpointPath.flatMap { $0 == "NotFound" ? nil : $0 } ?? "unmatched"
        metrics.record(route: route, method: request.method.rawValue, status: response.status.code, duration: ContinuousClock.now - started)
        return response
    }

    static func apiError(_ error: any Error) -> APIError {
        if let error = error as? APIError { return error }
        if error is NIOTooManyBytesError { return .bodyTooLarge(0) }
        if let error = error as? any HTTPResponseError {
            switch error.status {
            case .notFound:
                return APIError(.notFound, "not_found", "No such route. The routes are listed in docs/api.md (POST /v1/notifications, GET /v1/queues/{queue}, …).")
            case .methodNotAllowed:
                return APIError(.methodNotAllowed, "method_not_allowed", "This route does not take that method; see docs/api.md.")
            default:
                let status = error.status
                return APIError(status, "http_\(status.code)", status.reasonPhrase.isEmpty ? "HTTP \(status.code)" : status.reasonPhrase)
            }
        }
        return APIError(.internalServerError, "internal_error", "The API failed: \(error)")
    }
}

/// At most `limit` /v1 requests at once; the next gets 503 `busy` before its body is read, so
/// memory stays bounded by `limit` × the body limit however many clients connect.
struct ConcurrencyLimitMiddleware<Context: RequestContext>: RouterMiddleware {
    let limit: Int
    let gauge: RequestCounter

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        let now = gauge.value.add(1, ordering: .relaxed).newValue
        defer { gauge.value.subtract(1, ordering: .relaxed) }
        guard now <= limit else {
            throw APIError(.serviceUnavailable, "busy",
                           "The API is serving \(limit) requests already (--max-concurrent-requests); try again in a moment.",
                           headers: [(.retryAfter, "1")])
        }
        return try await next(request, context)
    }
}

/// A count shared by the requests being served.
final class RequestCounter: Sendable {
    let value = Atomic<Int>(0)
}

/// `Authorization: Bearer <token>` against `BearerTokens`; 401 with `WWW-Authenticate` otherwise.
struct BearerAuthMiddleware<Context: RequestContext>: RouterMiddleware {
    let tokens: BearerTokens

    func handle(_ request: Request, context: Context, next: (Request, Context) async throws -> Response) async throws -> Response {
        guard let header = request.headers[.authorization] else {
            throw APIError(.unauthorized, "unauthorized", "This route needs `Authorization: Bearer <token>` with a token from the API's token file.",
                           headers: [(.wwwAuthenticate, "Bearer realm=\"herald\"")])
        }
        let prefix = "Bearer "
        guard header.count > prefix.count, header.prefix(prefix.count).lowercased() == prefix.lowercased(),
              tokens.accepts(header.dropFirst(prefix.count).trimmingPrefix(while: { $0 == " " })) else {
            throw APIError(.unauthorized, "unauthorized", "The bearer token is not one of the API's tokens (or the header is not `Bearer <token>`).",
                           headers: [(.wwwAuthenticate, "Bearer realm=\"herald\", error=\"invalid_token\"")])
        }
        return try await next(request, context)
    }
}

/// The routes' templates (`APIServer.routes`), to tell "no such path" (404) from "no such method
/// on this path" (405 with `Allow`), which Hummingbird's router does not distinguish.
enum RouteTable {
    static let templates: [(method: String, segments: [Substring])] = APIServer.routes.map { route in
        let parts = route.split(separator: " ", maxSplits: 1)
        return (String(parts[0]), parts[1].split(separator: "/"))
    }

    /// The methods the routes take on `path`, or nil when no route has that path.
    static func methods(forPath path: String) -> [String]? {
        let segments = path.split(separator: "/")
        let methods = templates.filter { template in
            template.segments.count == segments.count
                && zip(template.segments, segments).allSatisfy { $0.hasPrefix("{") || $0 == $1 }
        }.map(\.method)
        return methods.isEmpty ? nil : methods
    }
}
