//! The closed set of scalar primitives, defined once: name, arity, and whether the result
//! is a bool. Lowerings compose them; code generation implements each for every dtype.

macro_rules! define_prims {
    ($( $variant:ident => $name:literal, $arity:literal, $bool_result:literal; )*) => {
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Prim { $( $variant, )* }

        impl Prim {
            /// The name the text IR prints.
            pub fn name(self) -> &'static str {
                match self { $( Prim::$variant => $name, )* }
            }

            pub fn arity(self) -> usize {
                match self { $( Prim::$variant => $arity, )* }
            }

            /// Comparisons and logical ops produce bools whatever their operand type.
            pub fn returns_bool(self) -> bool {
                match self { $( Prim::$variant => $bool_result, )* }
            }
        }
    };
}

define_prims! {
    Neg => "neg", 1, false;
    Abs => "abs", 1, false;
    Recip => "recip", 1, false;
    Sqrt => "sqrt", 1, false;
    Rsqrt => "rsqrt", 1, false;
    Exp => "exp", 1, false;
    Expm1 => "expm1", 1, false;
    Log => "log", 1, false;
    Log1p => "log1p", 1, false;
    Sin => "sin", 1, false;
    Cos => "cos", 1, false;
    Tanh => "tanh", 1, false;
    Erf => "erf", 1, false;
    Tan => "tan", 1, false;
    Asin => "asin", 1, false;
    Acos => "acos", 1, false;
    Atan => "atan", 1, false;
    Sinh => "sinh", 1, false;
    Cosh => "cosh", 1, false;
    Asinh => "asinh", 1, false;
    Acosh => "acosh", 1, false;
    Atanh => "atanh", 1, false;
    Log2 => "log2", 1, false;
    Log10 => "log10", 1, false;
    Sigmoid => "sigmoid", 1, false;
    Floor => "floor", 1, false;
    Ceil => "ceil", 1, false;
    Trunc => "trunc", 1, false;
    Round => "round", 1, false;
    Not => "not", 1, true;
    BitNot => "bitnot", 1, false;
    Add => "add", 2, false;
    Sub => "sub", 2, false;
    Mul => "mul", 2, false;
    // On integers, div truncates and fmod has the dividend's sign (C's / and %); neither
    // traps: a zero divisor gives 0 and MIN / -1 wraps to MIN.
    Div => "div", 2, false;
    Fmod => "fmod", 2, false;
    Atan2 => "atan2", 2, false;
    Max => "max", 2, false;
    Min => "min", 2, false;
    // On integers, a negative exponent gives 1 for base 1, +-1 for base -1, else 0 (torch).
    Pow => "pow", 2, false;
    Eq => "eq", 2, true;
    Ne => "ne", 2, true;
    Lt => "lt", 2, true;
    Le => "le", 2, true;
    Gt => "gt", 2, true;
    Ge => "ge", 2, true;
    And => "and", 2, true;
    Or => "or", 2, true;
    BitAnd => "bitand", 2, false;
    BitOr => "bitor", 2, false;
    BitXor => "bitxor", 2, false;
    // Integers only: the bits shifted right with zeros shifted in (the operand read as
    // unsigned), by the amount modulo the bit width. Hashing for random numbers needs it.
    ShrU => "shr_u", 2, false;
}
