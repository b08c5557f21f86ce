import CPCRE2

/// Why a MATCHES pattern could not be compiled.
public struct RegularExpressionError: Error, Sendable, Equatable, CustomStringConvertible {
    public var message: String
    /// UTF-8 offset in the pattern where PCRE2 reports the error.
    public var offset: Int

    public init(message: String, offset: Int) {
        self.message = message
        self.offset = offset
    }

    public var description: String { "\(message) at offset \(offset)" }
}

/// A compiled NSPredicate `MATCHES` pattern (PCRE2 syntax, which for ordinary patterns agrees with the
/// ICU syntax NSPredicate uses).
///
/// The match is of the whole string: the pattern is compiled with `PCRE2_ANCHORED | PCRE2_ENDANCHORED`
/// rather than wrapped in `^(?:…)$`, so error offsets refer to the pattern as written and `(?x)`
/// comments cannot swallow a wrapper. `PCRE2_UTF | PCRE2_UCP` make `.`, `\w`, `\d`, `\b`, `[[:alpha:]]`
/// and case-insensitivity Unicode-aware; `\C` (a single code unit) is refused.
///
/// The work of one match is bounded: the match limit (`matchLimit` backtracking steps, JIT or not), the
/// depth and heap limits of the interpreter, and the JIT stack (PCRE2's default 32 KiB, then a retry
/// with a private stack of up to `jitStackLimit`) all make `pcre2_match` give up, in which case
/// `matches` answers `false`. A pattern with catastrophic backtracking such as `(a+)+$` therefore
/// costs a few milliseconds instead of hanging. A pattern cannot raise these limits with
/// `(*LIMIT_MATCH=…)`, only lower them.
///
/// Thread safety: the compiled code and the match context are only read after `init`; every call of
/// `matches` allocates its own match data, so one instance can be used from many threads at once.
public final class RegularExpression: Sendable {
    /// Patterns longer than this many UTF-8 bytes are refused.
    public static let maximumPatternLength = 4096
    /// Backtracking steps allowed per match (`pcre2_set_match_limit`).
    public static let matchLimit: UInt32 = 1_000_000
    /// Backtracking depth allowed per match, interpreter only (`pcre2_set_depth_limit`).
    public static let depthLimit: UInt32 = 1_000_000
    /// The largest JIT stack a match may use, in bytes, when the default 32 KiB is not enough.
    public static let jitStackLimit = 8 * 1024 * 1024
    /// Heap for backtracking per match, interpreter only, in KiB (`pcre2_set_heap_limit`).
    public static let heapLimitKiB: UInt32 = 16 * 1024

    public let pattern: String
    public let caseInsensitive: Bool
    /// Whether the pattern was JIT-compiled (otherwise the interpreter runs it).
    public let isJITCompiled: Bool

    // Immutable after init; PCRE2 allows concurrent matching against one compiled pattern and
    // only reads the match context.
    nonisolated(unsafe) private let code: OpaquePointer
    nonisolated(unsafe) private let matchContext: OpaquePointer

    public init(pattern: String, caseInsensitive: Bool = false) throws(RegularExpressionError) {
        var patternBytes = pattern
        guard patternBytes.utf8.count <= Self.maximumPatternLength else {
            throw RegularExpressionError(
                message: "pattern is longer than \(Self.maximumPatternLength) bytes", offset: Self.maximumPatternLength)
        }
        var options = PCRE2_UTF | PCRE2_UCP | PCRE2_NO_UTF_CHECK | PCRE2_NEVER_BACKSLASH_C
            | PCRE2_ANCHORED | PCRE2_ENDANCHORED
        if caseInsensitive { options |= PCRE2_CASELESS }
        var errorCode: Int32 = 0
        var errorOffset = 0
        let compiled: OpaquePointer? = patternBytes.withUTF8 { buf in
            // PCRE2 10.42 rejects a NULL pattern even with length 0.
            withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { empty in
                pcre2_compile_8(buf.baseAddress ?? UnsafePointer(empty.baseAddress), buf.count, options,
                                &errorCode, &errorOffset, nil)
            }
        }
        guard let compiled else {
            throw RegularExpressionError(message: Self.errorMessage(errorCode), offset: errorOffset)
        }
        // Without a match context the limits would be PCRE2's defaults (10 million steps).
        guard let context = pcre2_match_context_create_8(nil) else {
            pcre2_code_free_8(compiled)
            throw RegularExpressionError(message: "out of memory", offset: 0)
        }
        pcre2_set_match_limit_8(context, Self.matchLimit)
        pcre2_set_depth_limit_8(context, Self.depthLimit)
        pcre2_set_heap_limit_8(context, Self.heapLimitKiB)
        code = compiled
        matchContext = context
        // A pattern the JIT cannot compile (or a PCRE2 built without JIT) runs in the interpreter.
        isJITCompiled = pcre2_jit_compile_8(compiled, PCRE2_JIT_COMPLETE) == 0
        self.pattern = pattern
        self.caseInsensitive = caseInsensitive
    }

    deinit {
        pcre2_match_context_free_8(matchContext)
        pcre2_code_free_8(code)
    }

    /// Whole-string match. `false` also when a limit stopped the match or memory ran out.
    public func matches(_ s: String) -> Bool {
        var subject = s
        return subject.withUTF8 { buf in
            guard let matchData = pcre2_match_data_create_8(1, nil) else { return false }
            defer { pcre2_match_data_free_8(matchData) }
            return withUnsafeTemporaryAllocation(of: UInt8.self, capacity: 1) { empty in
                // PCRE2 10.42 rejects a NULL subject even with length 0.
                guard let base = buf.baseAddress ?? UnsafePointer(empty.baseAddress) else { return false }
                var rc = pcre2_match_8(code, base, buf.count, 0, PCRE2_NO_UTF_CHECK, matchData, matchContext)
                if rc == PCRE2_ERROR_JIT_STACKLIMIT {
                    // The JIT's default 32 KiB stack is too small for this subject (deep backtracking
                    // on a long string): retry with a private stack of up to `jitStackLimit` bytes.
                    rc = matchWithLargeJITStack(base, buf.count, matchData, matchContext)
                }
                // 0 would mean "matched, but the ovector is too small": still a match.
                return rc >= 0
            }
        }
    }

    private func matchWithLargeJITStack(_ subject: UnsafePointer<UInt8>, _ length: Int,
                                        _ matchData: OpaquePointer, _ shared: OpaquePointer) -> Int32 {
        // A JIT stack must not be used by two threads at once, so this one is private to the call, as
        // is the copy of the match context it is assigned to. Its memory is reserved, not committed.
        guard let stack = pcre2_jit_stack_create_8(32 * 1024, Self.jitStackLimit, nil) else { return PCRE2_ERROR_NOMEMORY }
        defer { pcre2_jit_stack_free_8(stack) }
        guard let context = pcre2_match_context_copy_8(shared) else { return PCRE2_ERROR_NOMEMORY }
        defer { pcre2_match_context_free_8(context) }
        pcre2_jit_stack_assign_8(context, nil, UnsafeMutableRawPointer(stack))
        return pcre2_match_8(code, subject, length, 0, PCRE2_NO_UTF_CHECK, matchData, context)
    }

    private static func errorMessage(_ code: Int32) -> String {
        var buffer = [UInt8](repeating: 0, count: 256)
        let n = buffer.withUnsafeMutableBufferPointer { pcre2_get_error_message_8(code, $0.baseAddress, $0.count) }
        guard n > 0 else { return "PCRE2 error \(code)" }
        return String(decoding: buffer[0..<Int(n)], as: UTF8.self)
    }
}
