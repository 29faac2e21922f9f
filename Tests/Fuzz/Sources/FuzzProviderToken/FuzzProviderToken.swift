import APNs

/// The input as the `authorization: bearer` token the APNs emulator receives: taken apart by
/// `ParsedProviderToken.parse`. A token that parses is ES256 with a 64-byte signature, and its
/// signing input is the text before the second dot.
@_cdecl("LLVMFuzzerTestOneInput")
public func fuzz(_ data: UnsafePointer<UInt8>?, _ size: Int) -> CInt {
    let text = String(decoding: UnsafeBufferPointer(start: data, count: size), as: UTF8.self)
    do {
        let token = try ParsedProviderToken.parse(text)
        guard token.alg == "ES256", token.signature.count == 64 else { fatalError("parsed a token that is not ES256") }
        guard token.signingInput.filter({ $0 == UInt8(ascii: ".") }).count == 1 else {
            fatalError("signing input is not header.claims")
        }
    } catch {
        _ = error.description
    }
    return 0
}
