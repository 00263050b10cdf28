//! Every emulator's known difference from AWS that the kit works around,
//! in one place (listed in `localstack/README.md`): ministack's mappings
//! answer numbers as strings ([`string_numbers`]); fakecloud reads a
//! `Ref` to a `Number` parameter as its default ([`template_numbers`]).

#[cfg(feature = "ops")]
pub mod string_numbers;
pub mod template_numbers;
