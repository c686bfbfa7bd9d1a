//! YAML as bulkhead prints it: the CRD, and the output of `plan` and `check`.
//! serde-saphyr (the YAML library kube already brings) with one change from
//! its defaults: a long string stays on one line, as kubectl prints it, rather
//! than folded at 80 columns.

use serde::Serialize;

pub fn to_yaml<T: Serialize>(value: &T) -> Result<String, serde_saphyr::SerializeError> {
    serde_saphyr::to_string_with_options(value, serde_saphyr::ser_options! { folded_wrap_chars: usize::MAX })
}
