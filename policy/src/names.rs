//! `stable_names!`: an enum of names that are part of the contract (error codes, audit record
//! kinds), written as text only through `as_str` and read back only through `parse`, which
//! knows no name it was not given. The gateway's codes and the store's record kinds are both
//! made by it, so the two cannot drift apart in how they are spelled, compared or serialised.

/// Declares `enum $name { Variant = "text", … }` with `ALL`, `as_str`, `parse`, `Display` and
/// `Serialize` (as its text).
#[macro_export]
macro_rules! stable_names {
    ($(#[$meta:meta])* $vis:vis enum $name:ident { $($variant:ident = $text:literal,)* }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        $vis enum $name {
            $($variant,)*
        }

        impl $name {
            /// Every name, for tests and documents.
            pub const ALL: &'static [$name] = &[$($name::$variant,)*];

            /// The name as the contract spells it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// The name spelled `text`, if it is one.
            pub fn parse(text: &str) -> Option<$name> {
                match text {
                    $($text => Some($name::$variant),)*
                    _ => None,
                }
            }
        }

        impl ::std::fmt::Display for $name {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                f.write_str(self.as_str())
            }
        }

        impl ::serde::Serialize for $name {
            fn serialize<S: ::serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(self.as_str())
            }
        }
    };
}
