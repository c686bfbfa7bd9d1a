//! Kubernetes quantities ("500m", "1Gi", "1e3") compared by value: the API
//! server may store a quantity in another form than the one written.

/// A quantity in billionths of a unit: every suffix Kubernetes accepts
/// (n u m k M G T P E, Ki … Ei) and exponents (1e3). None when it does not
/// parse or does not fit, and the two sides then compare as text.
pub fn nano_units(q: &str) -> Option<i128> {
    let q = q.trim();
    let (negative, q) = match q.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, q.strip_prefix('+').unwrap_or(q)),
    };
    let split = q.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let scale: i128 = match suffix {
        "n" => 1,
        "u" => 1_000,
        "m" => 1_000_000,
        "" => 1_000_000_000,
        "k" => 10i128.pow(12),
        "M" => 10i128.pow(15),
        "G" => 10i128.pow(18),
        "T" => 10i128.pow(21),
        "P" => 10i128.pow(24),
        "E" => 10i128.pow(27),
        "Ki" | "Mi" | "Gi" | "Ti" | "Pi" | "Ei" => {
            let power = 10 * (1 + ["Ki", "Mi", "Gi", "Ti", "Pi", "Ei"].iter().position(|s| *s == suffix)? as u32);
            2i128.checked_pow(power)?.checked_mul(1_000_000_000)?
        }
        exp if exp.starts_with(['e', 'E']) => {
            let e: i32 = exp[1..].parse().ok()?;
            let e = e.checked_add(9)?;
            if e < 0 {
                return None;
            }
            10i128.checked_pow(u32::try_from(e).ok()?)?
        }
        _ => return None,
    };
    if number.is_empty() || number == "." {
        return None;
    }
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    let int: i128 = if int.is_empty() { 0 } else { int.parse().ok()? };
    let frac_value: i128 = if frac.is_empty() { 0 } else { frac.parse().ok()? };
    let frac_scale = 10i128.checked_pow(u32::try_from(frac.len()).ok()?)?;
    let value = int.checked_mul(scale)?.checked_add(frac_value.checked_mul(scale)? / frac_scale)?;
    Some(if negative { -value } else { value })
}
