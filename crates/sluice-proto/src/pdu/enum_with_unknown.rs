//! `enum_with_unknown!`: a numeric field code as an enum of its named values plus
//! `Unknown(raw)`.
//!
//! A PDU field must keep whatever value the peer sent, known or not, so that parse and emit
//! round-trip and a target can answer an unknown code itself (e.g. "Task management function
//! not supported"). An enum with a catch-all variant gives both: `match` on names, and no value
//! lost. Each code is declared once, with its wire value and its words:
//!
//! ```text
//! enum_with_unknown! {
//!     /// Reject reasons (RFC 7143 section 11.17.1).
//!     pub enum RejectReason(u8) {
//!         /// 0x02: Data (payload) digest error.
//!         DataDigestError = 0x02 => "data digest error",
//!     }
//! }
//! ```
//!
//! which defines the enum with an extra `Unknown(u8)` variant, `Clone, Copy, Eq, PartialEq,
//! Hash`, `From<u8>` both ways, `const fn`s `code` and `from_code`, `description` (the words),
//! `KNOWN` (every named variant), and `Debug` and `Display` that show the number of an unknown
//! value in hex.
//!
//! `from_code` never yields `Unknown` of a named value, so every value built from the wire (or
//! through `From`) has exactly one representation and the derived equality is equality of
//! codes. Writing `Unknown(0x02)` by hand bypasses that; don't.

/// Defines a code enum with an `Unknown` variant; see the [module docs](self).
macro_rules! enum_with_unknown {
    (
        $(#[$enum_attr:meta])*
        $vis:vis enum $name:ident($repr:ty) {
            $(
                $(#[$variant_attr:meta])*
                $variant:ident = $value:literal => $text:literal
            ),+ $(,)?
        }
    ) => {
        $(#[$enum_attr])*
        #[derive(Clone, Copy, Eq, PartialEq, Hash)]
        $vis enum $name {
            $(
                $(#[$variant_attr])*
                $variant,
            )+
            /// A value without a name here (reserved, vendor-specific or newer than RFC 7143),
            /// kept so that it round-trips unchanged.
            Unknown($repr),
        }

        impl $name {
            /// Every named variant, in declaration order (`Unknown` excluded).
            pub const KNOWN: &'static [Self] = &[$(Self::$variant),+];

            /// The wire value.
            pub const fn code(self) -> $repr {
                match self {
                    $(Self::$variant => $value,)+
                    Self::Unknown(code) => code,
                }
            }

            /// Decodes a wire value: its named variant, or `Unknown` if it has none.
            pub const fn from_code(code: $repr) -> Self {
                match code {
                    $($value => Self::$variant,)+
                    other => Self::Unknown(other),
                }
            }

            /// The value's name in words, as the RFC lists it; `"unknown"` for `Unknown`.
            pub const fn description(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                    Self::Unknown(_) => "unknown",
                }
            }
        }

        impl ::core::convert::From<$repr> for $name {
            fn from(code: $repr) -> Self {
                Self::from_code(code)
            }
        }

        impl ::core::convert::From<$name> for $repr {
            fn from(value: $name) -> Self {
                value.code()
            }
        }

        /// The variant's name; an unknown value shows its number (`Unknown(0x0d)`).
        impl ::core::fmt::Debug for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                match self {
                    $(Self::$variant => f.write_str(stringify!($variant)),)+
                    Self::Unknown(code) => write!(f, "Unknown({code:#04x})"),
                }
            }
        }

        /// The words; an unknown value shows its number (`unknown (0x0d)`).
        impl ::core::fmt::Display for $name {
            fn fmt(&self, f: &mut ::core::fmt::Formatter<'_>) -> ::core::fmt::Result {
                match self {
                    Self::Unknown(code) => write!(f, "unknown ({code:#04x})"),
                    known => f.write_str(known.description()),
                }
            }
        }
    };
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    enum_with_unknown! {
        /// A code for the tests.
        enum Color(u8) {
            /// 1.
            Red = 1 => "red",
            /// 0x10.
            Green = 0x10 => "green",
            /// 255, the largest value.
            Blue = 255 => "blue",
        }
    }

    #[test]
    fn every_known_value_round_trips() {
        for &(code, color) in &[(1, Color::Red), (0x10, Color::Green), (255, Color::Blue)] {
            assert_eq!(Color::from(code), color);
            assert_eq!(u8::from(color), code);
            assert_eq!(Color::from_code(code).code(), code);
        }
        assert_eq!(Color::KNOWN, &[Color::Red, Color::Green, Color::Blue]);
    }

    #[test]
    fn an_unknown_value_round_trips_as_unknown() {
        assert_eq!(Color::from(2), Color::Unknown(2));
        assert_eq!(u8::from(Color::Unknown(2)), 2);
        assert_eq!(Color::from(0), Color::Unknown(0));
        for code in 0..=u8::MAX {
            assert_eq!(u8::from(Color::from(code)), code);
            let named = Color::KNOWN.iter().any(|c| c.code() == code);
            assert_eq!(matches!(Color::from(code), Color::Unknown(_)), !named);
        }
    }

    #[test]
    fn debug_and_display_show_the_number_of_an_unknown_value() {
        assert_eq!(format!("{:?}", Color::Green), "Green");
        assert_eq!(format!("{}", Color::Green), "green");
        assert_eq!(Color::Green.description(), "green");
        assert_eq!(format!("{:?}", Color::Unknown(0x0d)), "Unknown(0x0d)");
        assert_eq!(format!("{}", Color::Unknown(0x0d)), "unknown (0x0d)");
        assert_eq!(Color::Unknown(0x0d).description(), "unknown");
    }

    #[test]
    fn equal_codes_hash_alike() {
        let set: HashSet<Color> = (0..=u8::MAX).map(Color::from).collect();
        assert_eq!(set.len(), 256);
        assert!(set.contains(&Color::from(0x10)) && set.contains(&Color::Unknown(7)));
    }

    #[test]
    fn const_fns_work_in_const_context() {
        const GREEN: Color = Color::from_code(0x10);
        const CODE: u8 = Color::Blue.code();
        assert_eq!((GREEN, CODE), (Color::Green, 255));
    }
}
