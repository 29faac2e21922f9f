import APNs
import Transport

/// A job's valid device tokens, in the order the job gave them.
///
/// The usual job has one token, and it is kept without a list: a one-element `[String]` was a
/// heap allocation per job on the worker's hot path (see Benchmarks/README.md, "End to end").
/// The decoder packs each 64-digit token (`DeviceToken`), so that one is not a string either.
/// Reads like an array (`count`, subscripts, `for`, `==` with an array literal).
public struct JobTokens: RandomAccessCollection, Equatable, Sendable, ExpressibleByArrayLiteral {
    private enum Storage: Equatable, Sendable {
        case one(DeviceToken)
        case list([DeviceToken])
    }

    private let storage: Storage

    /// One token, no list.
    public init(_ token: DeviceToken) { storage = .one(token) }

    public init(_ tokens: [DeviceToken]) {
        storage = tokens.count == 1 ? .one(tokens[0]) : .list(tokens)
    }

    /// One token kept as the text given.
    public init(_ token: String) { self.init(DeviceToken(token)) }

    /// Tokens kept as the text given.
    public init(_ tokens: [String]) { self.init(tokens.map { DeviceToken($0) }) }

    public init(arrayLiteral elements: String...) { self.init(elements) }

    /// Where the header of the one token's string, or of the list, lies: for a prefetch hint
    /// (`Transport.storageHeader(of:)`). Nil for one packed token: it lies in the job itself.
    var storageHeader: UnsafeRawPointer? {
        switch storage {
        case .one(let token): token.text.flatMap { Transport.storageHeader(of: $0) }
        case .list(let tokens): Transport.storageHeader(of: tokens)
        }
    }

    /// The token at `position` as the worker keeps it (no string is built for a packed token):
    /// what each request is addressed with.
    @inline(__always)
    public func token(at position: Int) -> DeviceToken {
        switch storage {
        case .one(let token):
            precondition(position == 0, "token index \(position) out of range (1 token)")
            return token
        case .list(let tokens): return tokens[position]
        }
    }

    public var startIndex: Int { 0 }

    public var endIndex: Int {
        switch storage {
        case .one: 1
        case .list(let tokens): tokens.count
        }
    }

    /// The token's text: builds a string for a packed token (the rare paths: dead letters,
    /// feedback, retries, receipts).
    public subscript(position: Int) -> String {
        token(at: position).string
    }

    /// The tokens as an array (allocates for the one-token case; not for the hot path).
    public var array: [String] {
        switch storage {
        case .one(let token): [token.string]
        case .list(let tokens): tokens.map(\.string)
        }
    }

    public static func == (lhs: JobTokens, rhs: JobTokens) -> Bool {
        lhs.count == rhs.count && (0..<lhs.count).allSatisfy { lhs.token(at: $0) == rhs.token(at: $0) }
    }
}
