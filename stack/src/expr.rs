//! Property values: literals and the CloudFormation intrinsic functions the
//! kit uses, as one typed enum. They serialize in the long form (`Ref:`,
//! `Fn::GetAtt: [A, B]`, `Fn::Sub:`, `Fn::Join:`), never as the `!Ref` short
//! tags, so the output is plain YAML (or JSON) that any parser reads and that
//! tests compare as trees.

use serde::Serialize;
use serde::ser::{SerializeMap, Serializer};

/// The pseudo parameter with the stack's name.
pub const AWS_STACK_NAME: &str = "AWS::StackName";
/// The pseudo parameter with the partition (`aws`, `aws-cn`, ...).
pub const AWS_PARTITION: &str = "AWS::Partition";

/// A literal scalar.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum Literal {
    String(String),
    Integer(i64),
    Boolean(bool),
}

/// A property value: a literal or an intrinsic function.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expr {
    Literal(Literal),
    /// A plain list of values, e.g. an IAM condition's values.
    List(Vec<Expr>),
    /// `Ref`: a parameter's value, a resource's primary id, or a pseudo
    /// parameter such as `AWS::Region`.
    Ref(String),
    /// `Fn::GetAtt`: an attribute of a resource.
    GetAtt(String, String),
    /// `Fn::Sub`: a string with `${Name}` / `${Resource.Attribute}` parts.
    Sub(String),
    /// `Fn::Join`: the parts joined by the delimiter.
    Join(String, Vec<Expr>),
    /// `Fn::Select`: the element at an index of a list (here: of a split).
    Select(u32, Box<Expr>),
    /// `Fn::Split`: a string cut at a delimiter, as a list.
    Split(String, Box<Expr>),
    /// `Fn::If`: one of two values, by a template condition's name.
    If(String, Box<Expr>, Box<Expr>),
    /// `Fn::Equals`, for a template condition.
    Equals(Box<Expr>, Box<Expr>),
    /// `Fn::And`, in a condition.
    And(Vec<Expr>),
    /// `Fn::Or`, in a condition.
    Or(Vec<Expr>),
    /// `Fn::Not`, in a condition.
    Not(Box<Expr>),
    /// `{"Condition": name}`: another condition, inside `Fn::And`/`Fn::Not`.
    Condition(String),
    /// `Fn::Contains`, a rule function only: whether the value is one of
    /// the strings.
    Contains(Vec<String>, Box<Expr>),
}

impl Expr {
    pub fn reference(logical_id: &str) -> Self {
        Expr::Ref(logical_id.to_owned())
    }

    pub fn get_att(logical_id: &str, attribute: &str) -> Self {
        Expr::GetAtt(logical_id.to_owned(), attribute.to_owned())
    }

    pub fn sub(template: impl Into<String>) -> Self {
        Expr::Sub(template.into())
    }

    pub fn join(delimiter: &str, parts: Vec<Expr>) -> Self {
        Expr::Join(delimiter.to_owned(), parts)
    }

    pub fn select(index: u32, list: Expr) -> Self {
        Expr::Select(index, Box::new(list))
    }

    pub fn split(delimiter: &str, source: Expr) -> Self {
        Expr::Split(delimiter.to_owned(), Box::new(source))
    }

    /// `Fn::If`: `then` when the template condition `condition` holds, else `otherwise`.
    pub fn when(condition: &str, then: Expr, otherwise: Expr) -> Self {
        Expr::If(condition.to_owned(), Box::new(then), Box::new(otherwise))
    }

    pub fn equals(a: Expr, b: Expr) -> Self {
        Expr::Equals(Box::new(a), Box::new(b))
    }

    /// `Ref: AWS::NoValue`: the property (or list element) is left out.
    pub fn no_value() -> Self {
        Expr::reference("AWS::NoValue")
    }

    pub fn and(conditions: Vec<Expr>) -> Self {
        Expr::And(conditions)
    }

    pub fn or(conditions: Vec<Expr>) -> Self {
        Expr::Or(conditions)
    }

    pub fn negate(condition: Expr) -> Self {
        Expr::Not(Box::new(condition))
    }

    /// A condition: the parameter `parameter` is not `value`.
    pub fn differs(parameter: &str, value: &str) -> Self {
        Expr::negate(Expr::equals(Expr::reference(parameter), value.into()))
    }

    pub fn condition(name: &str) -> Self {
        Expr::Condition(name.to_owned())
    }

    /// `Fn::Contains`: only in a template rule's assertions.
    pub fn contains(values: &[&str], value: Expr) -> Self {
        Expr::Contains(values.iter().map(|v| (*v).to_owned()).collect(), Box::new(value))
    }
}

impl From<&str> for Expr {
    fn from(value: &str) -> Self {
        Expr::Literal(Literal::String(value.to_owned()))
    }
}

impl From<String> for Expr {
    fn from(value: String) -> Self {
        Expr::Literal(Literal::String(value))
    }
}

impl From<i64> for Expr {
    fn from(value: i64) -> Self {
        Expr::Literal(Literal::Integer(value))
    }
}

impl From<bool> for Expr {
    fn from(value: bool) -> Self {
        Expr::Literal(Literal::Boolean(value))
    }
}

impl Serialize for Expr {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        // Each intrinsic is a one-key mapping; that is all the long form is.
        fn single<S: Serializer, V: Serialize + ?Sized>(
            serializer: S,
            key: &str,
            value: &V,
        ) -> Result<S::Ok, S::Error> {
            let mut map = serializer.serialize_map(Some(1))?;
            map.serialize_entry(key, value)?;
            map.end()
        }
        match self {
            Expr::Literal(literal) => literal.serialize(serializer),
            Expr::List(values) => values.serialize(serializer),
            Expr::Ref(name) => single(serializer, "Ref", name),
            Expr::GetAtt(resource, attribute) => single(serializer, "Fn::GetAtt", &[resource, attribute]),
            Expr::Sub(template) => single(serializer, "Fn::Sub", template),
            Expr::Join(delimiter, parts) => single(serializer, "Fn::Join", &(delimiter, parts)),
            Expr::Select(index, list) => single(serializer, "Fn::Select", &(index.to_string(), list)),
            Expr::Split(delimiter, source) => single(serializer, "Fn::Split", &(delimiter, source)),
            Expr::If(condition, then, otherwise) => single(serializer, "Fn::If", &(condition, then, otherwise)),
            Expr::Equals(a, b) => single(serializer, "Fn::Equals", &(a, b)),
            Expr::And(conditions) => single(serializer, "Fn::And", conditions),
            Expr::Or(conditions) => single(serializer, "Fn::Or", conditions),
            Expr::Not(condition) => single(serializer, "Fn::Not", &[condition]),
            Expr::Condition(name) => single(serializer, "Condition", name),
            Expr::Contains(values, value) => single(serializer, "Fn::Contains", &(values, value)),
        }
    }
}

/// A typed property value that exists only when a template condition
/// holds: `Fn::If: [condition, value, Ref AWS::NoValue]`, so the property is
/// left out of the resource when the condition is false.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OnlyIf<T> {
    pub condition: String,
    pub value: T,
}

impl<T> OnlyIf<T> {
    pub fn new(condition: &str, value: T) -> Self {
        Self {
            condition: condition.to_owned(),
            value,
        }
    }
}

impl<T: Serialize> Serialize for OnlyIf<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        let mut map = serializer.serialize_map(Some(1))?;
        map.serialize_entry("Fn::If", &(&self.condition, &self.value, Expr::no_value()))?;
        map.end()
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn tree(expr: &Expr) -> serde_json::Value {
        serde_json::to_value(expr).unwrap()
    }

    #[test]
    fn intrinsics_serialize_in_long_form() {
        assert_eq!(tree(&Expr::reference("Table")), json!({"Ref": "Table"}));
        assert_eq!(tree(&Expr::get_att("Q", "Arn")), json!({"Fn::GetAtt": ["Q", "Arn"]}));
        assert_eq!(tree(&Expr::sub("${P}-x")), json!({"Fn::Sub": "${P}-x"}));
        assert_eq!(
            tree(&Expr::join(",", vec!["a".into(), Expr::reference("B")])),
            json!({"Fn::Join": [",", ["a", {"Ref": "B"}]]})
        );
        assert_eq!(
            tree(&Expr::select(2, Expr::split("/", Expr::reference("AWS::StackId")))),
            json!({"Fn::Select": ["2", {"Fn::Split": ["/", {"Ref": "AWS::StackId"}]}]})
        );
        assert_eq!(
            tree(&Expr::when("C", "a".into(), Expr::no_value())),
            json!({"Fn::If": ["C", "a", {"Ref": "AWS::NoValue"}]})
        );
        assert_eq!(
            tree(&Expr::equals(Expr::reference("P"), "x".into())),
            json!({"Fn::Equals": [{"Ref": "P"}, "x"]})
        );
    }

    #[test]
    fn conditions_serialize_in_long_form() {
        let empty = Expr::equals(Expr::reference("P"), "".into());
        assert_eq!(tree(&empty), json!({"Fn::Equals": [{"Ref": "P"}, ""]}));
        assert_eq!(
            tree(&Expr::and(vec![Expr::condition("C"), Expr::negate(empty)])),
            json!({"Fn::And": [{"Condition": "C"}, {"Fn::Not": [{"Fn::Equals": [{"Ref": "P"}, ""]}]}]})
        );
        assert_eq!(
            tree(&Expr::when("C", Expr::reference("T"), Expr::reference("P"))),
            json!({"Fn::If": ["C", {"Ref": "T"}, {"Ref": "P"}]})
        );
    }

    #[test]
    fn a_conditional_property_is_left_out_when_its_condition_is_false() {
        let value = OnlyIf::new("C", json!({"A": 1}));
        assert_eq!(
            serde_json::to_value(&value).unwrap(),
            json!({"Fn::If": ["C", {"A": 1}, {"Ref": "AWS::NoValue"}]})
        );
        assert_eq!(
            tree(&Expr::or(vec![Expr::condition("A"), Expr::condition("B")])),
            json!({"Fn::Or": [{"Condition": "A"}, {"Condition": "B"}]})
        );
    }

    #[test]
    fn literals_serialize_as_plain_scalars() {
        assert_eq!(tree(&"x".into()), json!("x"));
        assert_eq!(tree(&7.into()), json!(7));
        assert_eq!(tree(&true.into()), json!(true));
    }

    #[test]
    fn yaml_needs_no_custom_tags() {
        let yaml = serde_yaml_ng::to_string(&Expr::get_att("Q", "Arn")).unwrap();
        assert!(!yaml.contains('!'), "{yaml}");
        let back: serde_json::Value = serde_yaml_ng::from_str(&yaml).unwrap();
        assert_eq!(back, json!({"Fn::GetAtt": ["Q", "Arn"]}));
    }
}
