/// ISO-8601 text for timestamps (milliseconds since 1970), exact and independent of the locale and
/// time zone database: proleptic Gregorian calendar, UTC.
public enum Timestamp {
    /// Seconds from 1970-01-01 to 2001-01-01, the NSDate reference date.
    public static let referenceDateOffset: Int64 = 978_307_200

    /// `2024-05-01T12:00:00Z`, with `.123` milliseconds when they are not zero. Years outside
    /// 0000–9999 take ISO 8601's expanded form, a sign and at least four digits (`+232061-03-29…`,
    /// `-0001-12-31…`), which `parseISO8601` reads back.
    public static func iso8601(_ milliseconds: Int64) -> String {
        let (seconds, millis) = milliseconds.floorDivided(by: 1000)
        let (days, secondOfDay) = seconds.floorDivided(by: 86_400)
        let (year, month, day) = civil(fromDays: days)
        let yearText = (0...9999).contains(year) ? pad(year, 4) : (year < 0 ? "" : "+") + pad(year, 4)
        var text = "\(yearText)-\(pad(month, 2))-\(pad(day, 2))T\(pad(secondOfDay / 3600, 2)):\(pad(secondOfDay / 60 % 60, 2)):\(pad(secondOfDay % 60, 2))"
        if millis != 0 { text += "." + pad(millis, 3) }
        return text + "Z"
    }

    /// Reads `YYYY-MM-DD`, `YYYY-MM-DDTHH:MM[:SS[.fff]]` with `Z` or `±HH:MM` (or no zone: UTC).
    /// The year may also be ISO 8601's expanded form: `+` or `-` and four to nine digits. Nil when
    /// the text is not such a date or the instant does not fit in 64-bit milliseconds.
    public static func parseISO8601(_ text: String) -> Int64? {
        var scanner = _Scanner(Array(text.utf8))
        let yearSign = scanner.sign()
        let year: Int64?
        if let yearSign {
            year = scanner.number(minimumDigits: 4, maximumDigits: 9).map { yearSign * $0 }
        } else {
            year = scanner.number(digits: 4)
        }
        guard let year, scanner.take(UInt8(ascii: "-")),
              let month = scanner.number(digits: 2), scanner.take(UInt8(ascii: "-")),
              let day = scanner.number(digits: 2),
              (1...12).contains(month), (1...daysIn(month: month, year: year)).contains(day)
        else { return nil }
        var seconds = days(fromCivil: year, month, day) * 86_400
        var millis: Int64 = 0
        if scanner.take(UInt8(ascii: "T")) || scanner.take(UInt8(ascii: " ")) {
            guard let hour = scanner.number(digits: 2), scanner.take(UInt8(ascii: ":")), let minute = scanner.number(digits: 2),
                  hour < 24, minute < 60
            else { return nil }
            var second: Int64 = 0
            if scanner.take(UInt8(ascii: ":")) {
                guard let s = scanner.number(digits: 2), s < 60 else { return nil }
                second = s
                if scanner.take(UInt8(ascii: ".")) {
                    var scale: Int64 = 100
                    var digits = 0
                    while let digit = scanner.digit() {
                        millis += digit * scale
                        scale /= 10
                        digits += 1
                    }
                    guard digits > 0 else { return nil }
                }
            }
            seconds += hour * 3600 + minute * 60 + second
            if scanner.take(UInt8(ascii: "Z")) {
            } else if let sign = scanner.sign() {
                guard let offsetHours = scanner.number(digits: 2) else { return nil }
                _ = scanner.take(UInt8(ascii: ":"))
                guard let offsetMinutes = scanner.number(digits: 2), offsetHours < 24, offsetMinutes < 60 else { return nil }
                seconds -= sign * (offsetHours * 3600 + offsetMinutes * 60)
            }
        }
        guard scanner.atEnd else { return nil }
        // Before 1970 the milliseconds are taken from the next second up, so Int64.min still fits.
        let borrow = seconds < 0 && millis > 0
        let (scaled, overflow) = (borrow ? seconds + 1 : seconds).multipliedReportingOverflow(by: 1000)
        guard !overflow else { return nil }
        let (total, carry) = scaled.addingReportingOverflow(borrow ? millis - 1000 : millis)
        return carry ? nil : total
    }

    /// Days since 1970-01-01 of a civil date (Howard Hinnant's `days_from_civil`).
    static func days(fromCivil year: Int64, _ month: Int64, _ day: Int64) -> Int64 {
        let y = month <= 2 ? year - 1 : year
        let era = (y >= 0 ? y : y - 399) / 400
        let yearOfEra = y - era * 400
        let dayOfYear = (153 * (month > 2 ? month - 3 : month + 9) + 2) / 5 + day - 1
        let dayOfEra = yearOfEra * 365 + yearOfEra / 4 - yearOfEra / 100 + dayOfYear
        return era * 146_097 + dayOfEra - 719_468
    }

    /// The civil date of a day count since 1970-01-01 (Hinnant's `civil_from_days`).
    static func civil(fromDays days: Int64) -> (year: Int64, month: Int64, day: Int64) {
        let z = days + 719_468
        let era = (z >= 0 ? z : z - 146_096) / 146_097
        let dayOfEra = z - era * 146_097
        let yearOfEra = (dayOfEra - dayOfEra / 1460 + dayOfEra / 36524 - dayOfEra / 146_096) / 365
        let dayOfYear = dayOfEra - (365 * yearOfEra + yearOfEra / 4 - yearOfEra / 100)
        let mp = (5 * dayOfYear + 2) / 153
        let day = dayOfYear - (153 * mp + 2) / 5 + 1
        let month = mp < 10 ? mp + 3 : mp - 9
        return (yearOfEra + era * 400 + (month <= 2 ? 1 : 0), month, day)
    }

    static func daysIn(month: Int64, year: Int64) -> Int64 {
        switch month {
        case 2: (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 ? 29 : 28
        case 4, 6, 9, 11: 30
        default: 31
        }
    }

    private static func pad(_ value: Int64, _ width: Int) -> String {
        let digits = String(abs(value))
        return (value < 0 ? "-" : "") + String(repeating: "0", count: max(0, width - digits.count)) + digits
    }

    private struct _Scanner {
        let bytes: [UInt8]
        var position = 0
        init(_ bytes: [UInt8]) { self.bytes = bytes }
        var atEnd: Bool { position == bytes.count }
        mutating func take(_ byte: UInt8) -> Bool {
            guard position < bytes.count, bytes[position] == byte else { return false }
            position += 1
            return true
        }
        mutating func digit() -> Int64? {
            guard position < bytes.count, bytes[position].isASCIIDigit else { return nil }
            position += 1
            return Int64(bytes[position - 1] - UInt8(ascii: "0"))
        }
        mutating func number(digits: Int) -> Int64? { number(minimumDigits: digits, maximumDigits: digits) }
        mutating func number(minimumDigits: Int, maximumDigits: Int) -> Int64? {
            var value: Int64 = 0
            var count = 0
            while count < maximumDigits, let d = digit() {
                value = value * 10 + d
                count += 1
            }
            return count >= minimumDigits ? value : nil
        }
        mutating func sign() -> Int64? {
            if take(UInt8(ascii: "+")) { return 1 }
            if take(UInt8(ascii: "-")) { return -1 }
            return nil
        }
    }
}

extension Int64 {
    /// Quotient and remainder rounding toward negative infinity.
    func floorDivided(by divisor: Int64) -> (Int64, Int64) {
        let (q, r) = quotientAndRemainder(dividingBy: divisor)
        return r < 0 ? (q - 1, r + divisor) : (q, r)
    }
}
