import Testing

/// Herald's client (`ConnectionPool`, `APNsConnection`) against Herald's APNs emulator over real
/// TLS and HTTP/2 on 127.0.0.1, in process. The nested suites run one test at a time: each test
/// loads both cores, and timing-sensitive ones (reconnect backoff) should not compete.
@Suite(.serialized)
struct IntegrationTests {}
