@testable import Transport

/// The input as `--redis` / `HERALD_REDIS` / the config file's `redis`: parsed into an endpoint.
/// Whatever parses, its description (the form Herald logs) never shows a password.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let url = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    // Most inputs lack the scheme; prefixing it too reaches the parts after it.
    for text in [url, "redis://" + url, "rediss://" + url] {
        do {
            let endpoint = try RedisEndpoint(url: text)
            let shown = endpoint.description
            // `rediss://` exactly when the endpoint speaks TLS.
            let scheme = endpoint.tls == nil ? "redis://" : "rediss://"
            guard shown.hasPrefix(scheme) else { fatalError("an endpoint is described with the wrong scheme") }
            if let password = endpoint.password {
                // `redis://<user, percent-encoded>:***@host…`: the password never shows.
                guard let marker = shown.firstRange(of: ":***@") else {
                    fatalError("an endpoint with a password is described without hiding it")
                }
                // Before the placeholder stands exactly the user, percent-encoded, nothing else.
                let userPart = shown[shown.index(shown.startIndex, offsetBy: scheme.count)..<marker.lowerBound]
                if userPart != RedisEndpoint.percentEncoded(endpoint.user ?? "") {
                    fatalError("an endpoint's description shows more than its user before the password's place: \(password.count)-byte password")
                }
            }
        } catch {
            _ = error.description
        }
    }
    return 0
}
