import Transport

/// A job's valid device tokens, in the order the job gave them.
///
/// The usual job has one token, and it is kept without a list: a one-element `[String]` was a
/// heap allocation per job on the worker's hot path (see Benchmarks/README.md, "End to end").
/// Reads like an array (`count`, subscripts, `for`, `==` with an array literal).
public struct JobTokens: RandomAccessCollection, Equatable, Sendable, ExpressibleByArrayLiteral {
    private enum Storage: Equatable, Sendable {
        case one(String)
        case list([String])
    }

    private let storage: Storage

    /// One token, no list.
    public init(_ token: String) { storage = .one(token) }

    public init(_ tokens: [String]) {
        storage = tokens.count == 1 ? .one(tokens[0]) : .list(tokens)
    }

    public init(arrayLiteral elements: String...) { self.init(elements) }

    /// Where the header of the one token's string, or of the list, lies: for a prefetch hint
    /// (`Transport.storageHeader(of:)`).
    var storageHeader: UnsafeRawPointer? {
        switch storage {
        case .one(let token): Transport.storageHeader(of: token)
        case .list(let tokens): Transport.storageHeader(of: tokens)
        }
    }

    public var startIndex: Int { 0 }

    public var endIndex: Int {
        switch storage {
        case .one: 1
        case .list(let tokens): tokens.count
        }
    }

    public subscript(position: Int) -> String {
        switch storage {
        case .one(let token):
            precondition(position == 0, "token index \(position) out of range (1 token)")
            return token
        case .list(let tokens): return tokens[position]
        }
    }

    /// The tokens as an array (allocates for the one-token case; not for the hot path).
    public var array: [String] {
        switch storage {
        case .one(let token): [token]
        case .list(let tokens): tokens
        }
    }

    public static func == (lhs: JobTokens, rhs: JobTokens) -> Bool {
        lhs.count == rhs.count && lhs.elementsEqual(rhs)
    }
}
