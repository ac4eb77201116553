// XML documents of the AWS APIs (S3's listings and errors, STS's answers),
// read with Boost.PropertyTree (internal to src/storage).
//
//   ASSIGN_OR_RETURN(XmlTree tree, ParseXml(response.body));
//   std::string code = XmlText(tree, "Error.Code");   // "" when absent
#ifndef HETERODL_SRC_STORAGE_XML_H_
#define HETERODL_SRC_STORAGE_XML_H_

#include <string>

#include "absl/status/statusor.h"
#include "boost/property_tree/ptree.hpp"

namespace heterodl {

using XmlTree = boost::property_tree::ptree;

// INVALID_ARGUMENT (with the parser's message and the text's start) when
// `text` is not well-formed XML.
absl::StatusOr<XmlTree> ParseXml(const std::string& text);

// The text at `path` ("A.B.C": child elements by name), or "".
std::string XmlText(const XmlTree& tree, const std::string& path);

}  // namespace heterodl

#endif  // HETERODL_SRC_STORAGE_XML_H_
